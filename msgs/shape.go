package msgs

// Shapes tell the parser which parts of a message a decoder reads, so that
// it keeps only those: a value the shape does not name (an unknown key's,
// an array where a number belongs) is checked for well-formedness and
// skipped without being stored. A request's memory is then what its known
// fields hold, whatever it carries besides (docs/protocol.md, "Limits").

// shapeKind says what a shape expects.
type shapeKind uint8

const (
	scalarShape shapeKind = iota // nil, bool, number, string, bin or ext; a container is skipped
	arrayShape                   // an array whose elements have shape elem
	objectShape                  // a map whose known keys are fields; other keys are skipped
	dictShape                    // a map of string keys chosen by the sender, values of shape elem
)

// shape is what a decoder reads of one value.
type shape struct {
	kind   shapeKind
	elem   *shape              // arrayShape, dictShape: the elements
	fields map[string]knownKey // objectShape: the known keys
}

// knownKey is one known key of an object shape.
type knownKey struct {
	name  string // the key, kept so that a key read from the wire is not copied
	shape *shape
}

var scalar = &shape{kind: scalarShape}

func arrayOf(elem *shape) *shape { return &shape{kind: arrayShape, elem: elem} }

func dictOf(elem *shape) *shape { return &shape{kind: dictShape, elem: elem} }

// objectOf returns an object shape of keys; a key's shape is scalar unless
// nested names it.
func objectOf(keys []string, nested map[string]*shape) *shape {
	s := &shape{kind: objectShape, fields: map[string]knownKey{}}
	for _, k := range keys {
		s.fields[k] = knownKey{name: k, shape: scalar}
	}
	for k, n := range nested {
		s.fields[k] = knownKey{name: k, shape: n}
	}
	return s
}

// union returns an object shape with the fields of every shape in ss (the
// first one's wins where two name the same key).
func union(ss ...*shape) *shape {
	u := &shape{kind: objectShape, fields: map[string]knownKey{}}
	for _, s := range ss {
		for k, f := range s.fields {
			if _, ok := u.fields[k]; !ok {
				u.fields[k] = f
			}
		}
	}
	return u
}

// The shapes of the protocol's messages (types.go), one per decoder.
var (
	numbers = arrayOf(scalar)

	frameShape = objectOf([]string{"v", "camera", "stamp_ns", "seq", "encoding", "width", "height", "step", "data"}, nil)
	poseShape  = objectOf([]string{"stamp_ns"}, map[string]*shape{"xyz": numbers, "rot": numbers})

	requestShape = objectOf([]string{"v", "id", "use_latest", "prompt", "max_reasoning_tokens", "deadline_ms",
		"nav_text", "question", "temperature", "top_p", "seed", "num_traj_samples"},
		map[string]*shape{"frames": arrayOf(frameShape), "ego_history": arrayOf(poseShape), "camera_order": arrayOf(scalar)})

	trajShape = objectOf([]string{"dt"}, map[string]*shape{"xyz": arrayOf(numbers), "rot": arrayOf(numbers)})

	planShape = objectOf([]string{"v", "id", "node", "model", "stamp_ns", "reasoning", "budget_bytes", "vram_peak_bytes", "answer"},
		map[string]*shape{
			"trajectory": trajShape,
			"actions":    arrayOf(numbers),
			"timing_ms":  objectOf([]string{"preprocess", "vision", "prefill", "decode", "diffusion", "total"}, nil),
			"samples":    arrayOf(objectOf(nil, map[string]*shape{"trajectory": trajShape, "actions": arrayOf(numbers)})),
		})

	errorShape = objectOf([]string{"v", "id"}, map[string]*shape{"error": objectOf([]string{"code", "message"}, nil)})

	replyShape = union(planShape, errorShape)

	statusShape = objectOf([]string{"v", "node", "model", "budget_bytes", "queue_depth"}, map[string]*shape{
		"plan": objectOf([]string{"mode", "resident_bytes", "streamed_bytes", "host_bytes", "fixed_bytes", "predicted_ms"}, nil),
		"gpu": objectOf([]string{"name", "memory_total_bytes", "memory_used_bytes", "memory_free_bytes", "pcie_gen",
			"pcie_gen_max", "pcie_width", "pcie_width_max", "temperature_c", "sm_clock_mhz", "mem_clock_mhz"},
			map[string]*shape{"throttle_reasons": arrayOf(scalar)}),
		"counters": dictOf(scalar),
	})

	idShape = objectOf([]string{"id"}, nil)
)
