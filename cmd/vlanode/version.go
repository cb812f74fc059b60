package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"vlanode/version"
)

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", stderr)
	asJSON := fs.Bool("json", false, "print the version as one JSON object")
	if err := parse(fs, args); err != nil {
		return err
	}
	v := version.Read()
	if *asJSON {
		return json.NewEncoder(stdout).Encode(v)
	}
	fmt.Fprintln(stdout, "vlanode", v)
	return nil
}
