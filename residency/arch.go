package residency

import (
	"errors"
	"fmt"
	"vlanode/placement"

	"vlanode/configs"
)

// Arch is what the planner needs of a model's architecture: the configs of
// its parts, as vlanode's loaders parse them. Vision, Expert and ActionIn
// are nil when the model lacks them (a Qwen3 text model has only Text).
type Arch struct {
	// Name identifies the model in reports, e.g. "alpamayo_r1".
	Name string
	// Vision is the Qwen3-VL vision tower (patch embedding, blocks,
	// DeepStack mergers, the patch merger).
	Vision *configs.Qwen3VLVision
	// Text is the language model: embedding, decoder layers, final norm and
	// LM head (the embedding matrix when tied).
	Text *configs.Qwen3
	// Expert is Alpamayo's action expert: a text stack without embeddings
	// that attends to the VLM's KV cache.
	Expert *configs.Qwen3
	// ActionIn is action_in_proj; set with Expert.
	ActionIn *configs.ActionInProjConfig
}

// Qwen3Arch is a Qwen3 text model.
func Qwen3Arch(c *configs.Qwen3) *Arch { return &Arch{Name: "qwen3", Text: c} }

// Qwen3VLArch is a Qwen3-VL model.
func Qwen3VLArch(c *configs.Qwen3VL) *Arch {
	v := c.Vision
	return &Arch{Name: "qwen3_vl", Vision: &v, Text: c.Text}
}

// AlpamayoR1Arch is an Alpamayo-R1 model: its config.json and the VLM
// config it names (configs.AlpamayoR1.LocateVLM). The VLM takes the
// checkpoint's vocabulary; the expert is the VLM's text config with
// expert_cfg applied, as the loaders build them.
func AlpamayoR1Arch(alp *configs.AlpamayoR1, vlm configs.VLMConfig) (*Arch, error) {
	vlmJSON, err := alp.VLMConfigJSON(vlm)
	if err != nil {
		return nil, fmt.Errorf("residency: %w", err)
	}
	vl, err := configs.ParseQwen3VL(vlmJSON)
	if err != nil {
		return nil, fmt.Errorf("residency: VLM config %s: %w", vlm.Path, err)
	}
	expJSON, err := alp.ExpertTextConfigJSON(vlm)
	if err != nil {
		return nil, fmt.Errorf("residency: %w", err)
	}
	exp, err := configs.ParseQwen3(expJSON)
	if err != nil {
		return nil, fmt.Errorf("residency: expert config: %w", err)
	}
	if alp.ActionInProjCfg == nil {
		return nil, errors.New("residency: alpamayo_r1 config has no action_in_proj_cfg")
	}
	a := Qwen3VLArch(vl)
	a.Name = alp.ModelType
	a.Expert, a.ActionIn = exp, alp.ActionInProjCfg
	return a, a.validate()
}

func (a *Arch) validate() error {
	if a.Text == nil {
		return errors.New("residency: the architecture has no text model")
	}
	if a.Expert != nil {
		if a.ActionIn == nil {
			return errors.New("residency: an expert needs action_in_proj")
		}
		if a.Expert.NumHiddenLayers != a.Text.NumHiddenLayers {
			return fmt.Errorf("residency: the expert has %d layers, the VLM %d: each expert layer reads its VLM layer's cache",
				a.Expert.NumHiddenLayers, a.Text.NumHiddenLayers)
		}
	}
	return nil
}

// Geometry is w seen through the architecture: the rows and passes of
// each stage.
func (a *Arch) Geometry(w placement.Workload) placement.Geometry {
	merge := 0
	if a.Vision != nil {
		merge = a.Vision.MergeUnit()
	}
	return placement.NewGeometry(w, merge, a.Expert != nil)
}

// checkUnits requires the units a family published for the architecture
// under w to be valid and to cover what the fixed costs assume: one text
// layer's parts per VLM index.
func (a *Arch) checkUnits(units []placement.Unit, w placement.Workload) error {
	if err := a.validate(); err != nil {
		return err
	}
	if err := w.Validate(); err != nil {
		return err
	}
	if a.Vision != nil && w.PatchesPerImage%a.Vision.MergeUnit() != 0 {
		return fmt.Errorf("residency: %d patches per image do not merge in groups of %d", w.PatchesPerImage, a.Vision.MergeUnit())
	}
	if len(units) == 0 {
		return errors.New("residency: no units to plan")
	}
	seen := map[placement.ID]bool{}
	var errs []error
	for _, u := range units {
		if err := u.Validate(); err != nil {
			errs = append(errs, err)
		}
		if seen[u.ID] {
			errs = append(errs, fmt.Errorf("residency: unit %s listed twice", u.ID))
		}
		seen[u.ID] = true
	}
	return errors.Join(errs...)
}
