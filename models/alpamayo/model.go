// Package alpamayo composes Alpamayo-R1 (NVlabs/alpamayo): the Qwen3-VL
// VLM under "vlm.", the action expert under "expert." with its action
// projections, and the prompt layout around them. Infer runs the whole
// pipeline: vision, prefill, reasoning decode, flow-matching diffusion, and
// the action space's integration into a trajectory.
package alpamayo

import (
	"fmt"
	"path/filepath"

	"vlanode/backend"
	"vlanode/configs"
	"vlanode/diffusion"
	"vlanode/models"
	"vlanode/models/layered"
	"vlanode/models/qwen3vl"
	"vlanode/placement"
	"vlanode/residency"
	"vlanode/safetensors"
	"vlanode/tokenizer"
)

// ModelType is the model_type of an Alpamayo-R1 config.json; Alpamayo
// 1.5's is configs.Alpamayo15ModelType (configs.IsAlpamayo accepts both).
const ModelType = configs.AlpamayoR1ModelType

// Model is a loaded Alpamayo-R1 checkpoint.
type Model struct {
	Config *configs.AlpamayoR1
	VLM    *qwen3vl.Model
	Expert *diffusion.Expert
	Tok    *tokenizer.Tokenizer
	Tokens Tokens

	// SyncStages ends the vision stage in a wait for the device, as on a
	// backend without a backend.Stopwatch, instead of a mark (benchmarks
	// compare the two).
	SyncStages bool

	be      backend.Backend
	ck      *safetensors.Checkpoint
	layered *layered.Executor // nil: every unit resident, run in place
	// hostWork, while a batch runs, runs a member's host-only work (its
	// sampling) beside the other members' code (gang.host); nil runs it
	// in place.
	hostWork func(fn func())
}

// LoadOptions tune Load.
type LoadOptions struct {
	// VLM overrides where the VLM's config.json is found (a folder or the
	// file), instead of resolving the checkpoint's vlm_name_or_path.
	VLM string
	// Layering, when set, places the units by a residency plan and runs
	// them through a layering executor.
	Layering *Layering
}

// Load reads an Alpamayo-R1 checkpoint: config.json, the VLM config it
// names, tokenizer.json, and the safetensors weights (memory-mapped; the
// model keeps them open until Close).
func Load(be backend.Backend, dir string, opt LoadOptions) (*Model, error) {
	cfg, qcfg, dcfg, err := readConfigs(dir, opt.VLM)
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, fmt.Errorf("alpamayo: %w", err)
	}
	ids, err := lookupTokens(tok, cfg)
	if err != nil {
		return nil, err
	}
	ck, err := safetensors.Open(dir)
	if err != nil {
		return nil, err
	}
	m := &Model{Config: cfg, Tok: tok, Tokens: ids, be: be, ck: ck}
	ld := models.NewLoader(be, ck)
	if opt.Layering != nil {
		if err := opt.Layering.ConfigureLoader(ld); err != nil {
			m.Close()
			return nil, err
		}
	}
	if m.VLM, err = qwen3vl.New(ld, qcfg, qwen3vl.Names{
		Vision: "vlm.model.visual.", Text: "vlm.model.language_model.", LMHead: "vlm.lm_head.weight",
	}); err != nil {
		m.Close()
		return nil, fmt.Errorf("alpamayo: loading the VLM: %w", err)
	}
	if m.Expert, err = diffusion.Load(ld, dcfg); err != nil {
		m.Close()
		return nil, fmt.Errorf("alpamayo: loading the action expert: %w", err)
	}
	if opt.Layering != nil {
		if m.layered, err = layered.New(opt.Layering, be, ld.Units); err != nil {
			m.Close()
			return nil, fmt.Errorf("alpamayo: %w", err)
		}
		m.VLM.Vision.Exec, m.VLM.Text.Exec, m.Expert.Exec = m.layered, m.layered, m.layered
	}
	if c, ok := be.(interface{ CopiesWeights() bool }); ok && c.CopiesWeights() {
		// The backend holds its own copy of every resident unit: the host
		// blobs (22 GB for the 10B) go back to the runtime. What the model
		// still reads on the host (the position table) keeps its bytes.
		for _, u := range ld.Units {
			if u.Weights == placement.Resident {
				u.Blob.Data = nil
			}
		}
	}
	return m, nil
}

// Plan is the plan the layered model runs (LoadOptions.Layering's, or the
// one made again with the exact compressed sizes); nil without Layering.
func (m *Model) Plan() *residency.Plan {
	if m.layered == nil {
		return nil
	}
	return m.layered.Plan()
}

// Compression is what compressing the streamed units did at load (nil when
// none was compressed).
func (m *Model) Compression() *models.CompressReport {
	if m.layered == nil {
		return nil
	}
	return m.layered.Compression()
}

// PlanNote says why the plan with the exact compressed sizes was not used,
// if it was not.
func (m *Model) PlanNote() string {
	if m.layered == nil {
		return ""
	}
	return m.layered.PlanNote()
}

// readConfigs reads the configs of the Alpamayo-R1 checkpoint in dir: its
// own, its VLM's (found as LoadOptions.VLM says) and its action side's.
func readConfigs(dir, vlm string) (*configs.AlpamayoR1, *configs.Qwen3VL, *diffusion.Config, error) {
	cfg, err := configs.LoadAlpamayoR1(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	vlmCfg, err := cfg.LocateVLM(dir, configs.VLMLocator{Override: vlm})
	if err != nil {
		return nil, nil, nil, err
	}
	vlmJSON, err := cfg.VLMConfigJSON(vlmCfg)
	if err != nil {
		return nil, nil, nil, err
	}
	qcfg, err := configs.ParseQwen3VL(vlmJSON)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("alpamayo: VLM config %s: %w", vlmCfg.Path, err)
	}
	dcfg, err := diffusion.NewConfig(cfg, vlmJSON)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("alpamayo: %w", err)
	}
	if got, want := dcfg.Expert.NumHiddenLayers, qcfg.Text.NumHiddenLayers; got != want {
		return nil, nil, nil, fmt.Errorf("alpamayo: the expert has %d layers, the VLM %d: each expert layer reads its VLM layer's cache", got, want)
	}
	return cfg, qcfg, dcfg, nil
}

// ActionSide is the action side of an Alpamayo-R1 checkpoint loaded
// alone, every unit resident: action_in_proj, the expert, action_out_proj
// and the action space, to run over a VLM cache from elsewhere (vlanode
// eval checks it against transformers this way).
type ActionSide struct {
	Expert *diffusion.Expert
	ck     *safetensors.Checkpoint
}

// LoadActionSide binds only the action side of the checkpoint in dir (the
// tensors diffusion.Load names; a checkpoint of just those will do). Of
// the configs it reads only what the action side needs: config.json's
// action-side entries and the VLM's text shapes, from the config.json that
// vlm_name_or_path names or from vlm (a folder or the file), as
// LoadOptions.VLM.
func LoadActionSide(be backend.Backend, dir, vlm string) (*ActionSide, error) {
	mt, err := configs.ReadModelType(dir)
	if err != nil {
		return nil, err
	}
	if !configs.IsAlpamayo(mt) {
		return nil, fmt.Errorf("%w; the action side is %s's or %s's", configs.UnknownArchitecture(dir, mt), ModelType, configs.Alpamayo15ModelType)
	}
	raw, err := readFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	alp, err := configs.DecodeAlpamayoR1(raw)
	if err != nil {
		return nil, fmt.Errorf("alpamayo: %s/config.json: %w", dir, err)
	}
	name := alp.VLMNameOrPath
	if name == "" {
		name = configs.DefaultVLMNameOrPath
	}
	vlmCfg, err := configs.VLMLocator{Override: vlm}.Locate(name, dir)
	if err != nil {
		return nil, err
	}
	dcfg, err := diffusion.NewConfig(alp, vlmCfg.Raw)
	if err != nil {
		return nil, fmt.Errorf("alpamayo: %w", err)
	}
	ck, err := safetensors.Open(dir)
	if err != nil {
		return nil, err
	}
	ex, err := diffusion.Load(models.NewLoader(be, ck), dcfg)
	if err != nil {
		ck.Close()
		return nil, fmt.Errorf("alpamayo: loading the action expert: %w", err)
	}
	return &ActionSide{Expert: ex, ck: ck}, nil
}

// Close releases the weights and the checkpoint.
func (a *ActionSide) Close() {
	a.Expert.Close()
	a.ck.Close()
}

// Close releases the weights and the checkpoint.
func (m *Model) Close() {
	if m.Expert != nil {
		m.Expert.Close()
	}
	if m.VLM != nil {
		m.VLM.Close()
	}
	if m.ck != nil {
		m.ck.Close()
	}
}

// Backend is the compute backend the model runs on.
func (m *Model) Backend() backend.Backend { return m.be }
