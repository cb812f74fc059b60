// Package configs parses model architecture configs (Hugging Face
// config.json compatible) and the standard workloads.
package configs

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrUnknownArchitecture is wrapped by errors for a model_type vlanode does
// not implement.
var ErrUnknownArchitecture = errors.New("unknown architecture")

// SupportedModelTypes lists the config.json model_type values vlanode runs.
var SupportedModelTypes = []string{"qwen3", "qwen3_vl", "alpamayo_r1", "alpamayo1_5"}

// ReadModelType reads only the model_type of DIR/config.json.
func ReadModelType(dir string) (string, error) {
	raw, err := readConfig(dir)
	if err != nil {
		return "", err
	}
	var head struct {
		ModelType string `json:"model_type"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return "", fmt.Errorf("configs: %s: %w", configPath(dir), err)
	}
	if head.ModelType == "" {
		return "", fmt.Errorf("configs: %s has no model_type", configPath(dir))
	}
	return head.ModelType, nil
}

func configPath(dir string) string { return filepath.Join(dir, "config.json") }

func readConfig(dir string) ([]byte, error) {
	raw, err := os.ReadFile(configPath(dir))
	if err != nil {
		return nil, fmt.Errorf("configs: reading model config: %w", err)
	}
	return raw, nil
}

// UnknownArchitecture is the error for a model_type vlanode cannot run.
func UnknownArchitecture(dir, modelType string) error {
	return fmt.Errorf("configs: %s: model_type %q: %w (supported: %v)", configPath(dir), modelType, ErrUnknownArchitecture, SupportedModelTypes)
}
