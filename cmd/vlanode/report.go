package main

import (
	"encoding/json"
	"io"
)

// report is what a command prints as its result: lines for people on
// stdout, or, with --json, one JSON object on stdout at the end while the
// lines go to stderr.
type report struct {
	asJSON bool
	stdout io.Writer
	stderr io.Writer
	obj    map[string]any
}

func newReport(asJSON bool, stdout, stderr io.Writer) *report {
	return &report{asJSON: asJSON, stdout: stdout, stderr: stderr, obj: map[string]any{}}
}

// lines is where the lines for people go.
func (r *report) lines() io.Writer {
	if r.asJSON {
		return r.stderr
	}
	return r.stdout
}

// set records a field of the JSON object.
func (r *report) set(key string, v any) { r.obj[key] = v }

// done prints the JSON object (with --json) and returns err, the command's
// result: the object is printed whether or not the command failed.
func (r *report) done(err error) error {
	if r.asJSON {
		if jerr := json.NewEncoder(r.stdout).Encode(r.obj); jerr != nil && err == nil {
			return jerr
		}
	}
	return err
}
