package configs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// ErrVLMNotFound is wrapped by VLMLocator's error when no candidate folder
// holds a config.json.
var ErrVLMNotFound = errors.New("VLM config not found")

// VLMConfig is the config.json of the VLM an Alpamayo checkpoint names,
// kept as raw bytes: its parser lives with the Qwen3-VL model.
type VLMConfig struct {
	// Path is the config.json that was read.
	Path string
	// Raw is its contents, unchanged.
	Raw []byte
}

// VLMLocator finds the VLM config.json that vlm_name_or_path names, where
// Hugging Face would: a local folder (absolute, or relative to the working
// directory, to the checkpoint folder or to the checkpoint's parent
// folder), then a hub id's snapshot in the Hugging Face cache. The zero
// value uses the process's working directory and environment.
type VLMLocator struct {
	// Override, when set, is the only place looked: a folder holding
	// config.json, or the config.json itself (the command line's --vlm).
	Override string
	// WorkDir resolves relative names; "" means os.Getwd.
	WorkDir string
	// Getenv reads HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME and HOME; nil means
	// os.Getenv.
	Getenv func(string) string
}

// hubID matches a Hugging Face repository id, "org/name".
var hubID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$`)

// Locate finds and reads the config.json for nameOrPath, the
// vlm_name_or_path of the checkpoint in checkpointDir. The error lists
// every place looked and wraps ErrVLMNotFound when none had it.
func (l VLMLocator) Locate(nameOrPath, checkpointDir string) (VLMConfig, error) {
	if l.Override != "" {
		return l.readOverride()
	}
	if nameOrPath == "" {
		return VLMConfig{}, errors.New("configs: vlm_name_or_path is empty")
	}
	var looked []string
	for _, dir := range l.localCandidates(nameOrPath, checkpointDir) {
		path := filepath.Join(dir, "config.json")
		if cfg, ok, err := readIfExists(path); err != nil || ok {
			return cfg, err
		}
		looked = append(looked, path)
	}
	if hubID.MatchString(nameOrPath) {
		cache := l.hubCache()
		repo := filepath.Join(cache, "models--"+strings.ReplaceAll(nameOrPath, "/", "--"))
		path, err := snapshotConfig(repo)
		if err != nil {
			return VLMConfig{}, err
		}
		if path != "" {
			cfg, _, err := readIfExists(path)
			return cfg, err
		}
		looked = append(looked, filepath.Join(repo, "snapshots", "*", "config.json"))
	}
	return VLMConfig{}, fmt.Errorf("configs: %w for vlm_name_or_path %q; looked in:\n  %s\n(give the folder explicitly, e.g. --vlm DIR)",
		ErrVLMNotFound, nameOrPath, strings.Join(looked, "\n  "))
}

// readOverride reads the explicitly given folder or file.
func (l VLMLocator) readOverride() (VLMConfig, error) {
	path := l.abs(l.Override)
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "config.json")
	}
	cfg, ok, err := readIfExists(path)
	if err != nil {
		return VLMConfig{}, err
	}
	if !ok {
		return VLMConfig{}, fmt.Errorf("configs: %w: the VLM config given explicitly, %s, does not exist", ErrVLMNotFound, path)
	}
	return cfg, nil
}

// localCandidates lists the folders nameOrPath may be, in search order,
// without repeats.
func (l VLMLocator) localCandidates(nameOrPath, checkpointDir string) []string {
	if filepath.IsAbs(nameOrPath) {
		return []string{filepath.Clean(nameOrPath)}
	}
	var out []string
	seen := map[string]bool{}
	add := func(base string) {
		dir := filepath.Join(l.abs(base), nameOrPath)
		if !seen[dir] {
			seen[dir] = true
			out = append(out, dir)
		}
	}
	add(".")
	if checkpointDir != "" {
		add(checkpointDir)
		add(filepath.Dir(l.abs(checkpointDir)))
	}
	return out
}

// abs resolves p against WorkDir.
func (l VLMLocator) abs(p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	wd := l.WorkDir
	if wd == "" {
		wd, _ = os.Getwd()
	}
	return filepath.Join(wd, p)
}

// hubCache is the Hugging Face hub cache folder, with huggingface_hub's
// precedence: $HF_HUB_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub,
// ~/.cache/huggingface/hub.
func (l VLMLocator) hubCache() string {
	getenv := l.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if v := getenv("HF_HUB_CACHE"); v != "" {
		return v
	}
	if v := getenv("HF_HOME"); v != "" {
		return filepath.Join(v, "hub")
	}
	if v := getenv("XDG_CACHE_HOME"); v != "" {
		return filepath.Join(v, "huggingface", "hub")
	}
	home := getenv("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	return filepath.Join(home, ".cache", "huggingface", "hub")
}

// snapshotConfig returns the config.json of the snapshot that refs/main
// names in a cached repository, or else of its most recently modified
// snapshot; "" if there is none.
func snapshotConfig(repo string) (string, error) {
	if ref, err := os.ReadFile(filepath.Join(repo, "refs", "main")); err == nil {
		path := filepath.Join(repo, "snapshots", strings.TrimSpace(string(ref)), "config.json")
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
	}
	matches, err := filepath.Glob(filepath.Join(repo, "snapshots", "*", "config.json"))
	if err != nil {
		return "", fmt.Errorf("configs: searching %s: %w", repo, err)
	}
	type snap struct {
		path string
		mod  int64
	}
	var snaps []snap
	for _, m := range matches {
		if st, err := os.Stat(filepath.Dir(m)); err == nil {
			snaps = append(snaps, snap{m, st.ModTime().UnixNano()})
		}
	}
	if len(snaps) == 0 {
		return "", nil
	}
	sort.Slice(snaps, func(i, j int) bool {
		if snaps[i].mod != snaps[j].mod {
			return snaps[i].mod > snaps[j].mod
		}
		return snaps[i].path > snaps[j].path
	})
	return snaps[0].path, nil
}

// readIfExists reads path; ok is false (and err nil) when it does not exist.
func readIfExists(path string) (cfg VLMConfig, ok bool, err error) {
	raw, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return VLMConfig{}, false, nil
	case err != nil:
		return VLMConfig{}, false, fmt.Errorf("configs: reading VLM config: %w", err)
	}
	if !json.Valid(raw) {
		return VLMConfig{}, false, fmt.Errorf("configs: VLM config %s is not valid JSON", path)
	}
	return VLMConfig{Path: path, Raw: raw}, true, nil
}

// LocateVLM finds the VLM config of the checkpoint in checkpointDir (see
// VLMLocator.Locate).
func (c *AlpamayoR1) LocateVLM(checkpointDir string, l VLMLocator) (VLMConfig, error) {
	return l.Locate(c.VLMNameOrPath, checkpointDir)
}

// VLMConfigJSON returns vlm's config with the extended vocabulary: both
// vocab_size and text_config.vocab_size become c.VocabSize, as
// ReasoningVLA does before building the VLM.
func (c *AlpamayoR1) VLMConfigJSON(vlm VLMConfig) ([]byte, error) {
	top, text, err := splitVLM(vlm)
	if err != nil {
		return nil, err
	}
	vocab, _ := json.Marshal(c.VocabSize)
	text["vocab_size"] = vocab
	top["vocab_size"] = vocab
	return joinVLM(top, text)
}

// ExpertTextConfigJSON returns the action expert's text config: the VLM's
// text_config (with the extended vocabulary) with every key of expert_cfg
// replaced, as AlpamayoR1 builds it.
func (c *AlpamayoR1) ExpertTextConfigJSON(vlm VLMConfig) ([]byte, error) {
	_, text, err := splitVLM(vlm)
	if err != nil {
		return nil, err
	}
	text["vocab_size"], _ = json.Marshal(c.VocabSize)
	for k, v := range c.ExpertCfg {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("configs: expert_cfg.%s: %w", k, err)
		}
		text[k] = b
	}
	return json.Marshal(text)
}

// splitVLM decodes the top level and the text_config of a VLM config.
func splitVLM(vlm VLMConfig) (top, text map[string]json.RawMessage, err error) {
	if err := json.Unmarshal(vlm.Raw, &top); err != nil {
		return nil, nil, fmt.Errorf("configs: VLM config %s: %w", vlm.Path, err)
	}
	raw, ok := top["text_config"]
	if !ok {
		return nil, nil, fmt.Errorf("configs: VLM config %s has no text_config", vlm.Path)
	}
	if err := json.Unmarshal(raw, &text); err != nil {
		return nil, nil, fmt.Errorf("configs: VLM config %s: text_config: %w", vlm.Path, err)
	}
	return top, text, nil
}

func joinVLM(top, text map[string]json.RawMessage) ([]byte, error) {
	b, err := json.Marshal(text)
	if err != nil {
		return nil, err
	}
	top["text_config"] = b
	return json.Marshal(top)
}
