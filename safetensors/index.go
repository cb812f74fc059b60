package safetensors

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// indexFile is the JSON of model.safetensors.index.json.
type indexFile struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

// readIndex reads the weight_map (tensor name -> shard file name) of the
// index file at path.
func readIndex(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	var idx indexFile
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("safetensors %s: invalid JSON: %w", path, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("safetensors %s: no weight_map, or an empty one", path)
	}
	for name, shard := range idx.WeightMap {
		if shard == "" {
			return nil, fmt.Errorf("safetensors %s: tensor %q has an empty shard name", path, name)
		}
	}
	return idx.WeightMap, nil
}

// WriteIndex writes dir/model.safetensors.index.json for a sharded
// checkpoint: weightMap maps each tensor name to its shard's file name (in
// dir), and totalSize is the sum of the tensors' data bytes, as Hugging Face
// records it.
func WriteIndex(dir string, weightMap map[string]string, totalSize int64) error {
	path := filepath.Join(dir, IndexFileName)
	for name, shard := range weightMap {
		if !filepath.IsLocal(shard) || filepath.Base(shard) != shard {
			return fmt.Errorf("safetensors: write %s: shard %q of tensor %q is not a plain file name", path, shard, name)
		}
	}
	idx := indexFile{Metadata: map[string]any{"total_size": totalSize}, WeightMap: weightMap}
	if idx.WeightMap == nil {
		idx.WeightMap = map[string]string{}
	}
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return fmt.Errorf("safetensors: write %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}
