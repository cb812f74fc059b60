package configs

import (
	"fmt"
	"slices"
	"strings"
)

// NVIDIA's code builds each module of an Alpamayo checkpoint with hydra's
// instantiate from a sub-config's _target_: a dotted path that Python
// imports. Several paths resolve to the same class: the module that
// defines it, the package that re-exports it, the same two in the
// alpamayo1_5 package of Alpamayo 1.5 (NVlabs/alpamayo1.5), and the
// release-to-training remapping of NVlabs/alpamayo
// scripts/convert_release_config_to_training.py (TARGET_REMAP:
// alpamayo1_5.{models.action_in_proj, models.delta_tokenizer,
// action_space, diffusion}.* → alpamayo_r1.*). A config written in any of
// these spellings loads in NVIDIA's code, so it loads here.

// Class is a class a sub-config's _target_ instantiates.
type Class struct {
	// Name is the class's name, the last element of every spelling.
	Name string
	// Spellings are every _target_ NVIDIA's code resolves to the class.
	Spellings []string
}

// The packages of NVIDIA's code: Alpamayo-R1's and Alpamayo 1.5's.
const (
	packageR1  = "alpamayo_r1"
	package1_5 = "alpamayo1_5"
)

// alpamayoClass lists the spellings of class name, defined in module (a
// path inside the package) and re-exported by the packages in reexports:
// each path in alpamayo_r1 and in alpamayo1_5. A path alpamayo1_5 itself
// does not re-export (DiscreteTrajectoryTokenizer from
// alpamayo1_5.action_space) still resolves: TARGET_REMAP maps it to
// alpamayo_r1's, which does.
func alpamayoClass(name, module string, reexports ...string) Class {
	c := Class{Name: name}
	for _, pkg := range []string{packageR1, package1_5} {
		for _, m := range append([]string{module}, reexports...) {
			c.Spellings = append(c.Spellings, pkg+"."+m+"."+name)
		}
	}
	return c
}

// The classes of the sub-configs vlanode runs.
var (
	// ClassUnicycleActionSpace is action_space_cfg's class; the package
	// action_space re-exports it.
	ClassUnicycleActionSpace = alpamayoClass("UnicycleAccelCurvatureActionSpace", "action_space.unicycle_accel_curvature", "action_space")
	// ClassActionInProjV2 is action_in_proj_cfg's class (models has no
	// __init__ re-exporting it).
	ClassActionInProjV2 = alpamayoClass("PerWaypointActionInProjV2", "models.action_in_proj")
	// ClassFlowMatching is diffusion_cfg's class (diffusion/__init__.py is
	// empty).
	ClassFlowMatching = alpamayoClass("FlowMatching", "diffusion.flow_matching")
	// ClassDiscreteTokenizer is traj_tokenizer_cfg's class, re-exported by
	// alpamayo_r1.action_space.
	ClassDiscreteTokenizer = alpamayoClass("DiscreteTrajectoryTokenizer", "action_space.discrete_action_space", "action_space")
	// ClassDeltaTokenizer is hist_traj_tokenizer_cfg's class.
	ClassDeltaTokenizer = alpamayoClass("DeltaTrajectoryTokenizer", "models.delta_tokenizer")
	// ClassLinear is action_out_proj_cfg's class: torch's nn.Linear, which
	// torch.nn re-exports from torch.nn.modules.linear.
	ClassLinear = Class{Name: "Linear", Spellings: []string{"torch.nn.Linear", "torch.nn.modules.linear.Linear"}}
)

// Hydra _target_ values as the published Alpamayo-R1 config spells them
// (the short, re-exported paths). Synthetic checkpoints write these.
const (
	TargetUnicycleActionSpace = "alpamayo_r1.action_space.UnicycleAccelCurvatureActionSpace"
	TargetActionInProjV2      = "alpamayo_r1.models.action_in_proj.PerWaypointActionInProjV2"
	TargetLinear              = "torch.nn.Linear"
	TargetFlowMatching        = "alpamayo_r1.diffusion.flow_matching.FlowMatching"
	TargetDiscreteTokenizer   = "alpamayo_r1.action_space.discrete_action_space.DiscreteTrajectoryTokenizer"
	TargetDeltaTokenizer      = "alpamayo_r1.models.delta_tokenizer.DeltaTrajectoryTokenizer"
)

// Accepts reports whether target is a spelling of c.
func (c Class) Accepts(target string) bool { return slices.Contains(c.Spellings, target) }

// Check returns nil when target (the _target_ of the sub-config at key)
// names c, and otherwise an error naming the key, the value and the
// accepted spellings.
func (c Class) Check(key, target string) error {
	if c.Accepts(target) {
		return nil
	}
	return fmt.Errorf("%s._target_ %q is not supported: vlanode runs %s, whose accepted _target_ values are %s",
		key, target, c.Name, strings.Join(c.Spellings, ", "))
}
