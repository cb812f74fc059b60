package msgs

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Every key a message type carries must be named by its decoder's shape:
// the parser skips a key its shape does not name, so a field added to a
// type but not to its shape would decode as absent.
func TestShapesNameEveryField(t *testing.T) {
	for _, c := range []struct {
		typ   any
		shape *shape
	}{
		{Frame{}, frameShape},
		{EgoPose{}, poseShape},
		{InferRequest{}, requestShape},
		{Plan{}, planShape},
		{Trajectory{}, planShape.fields["trajectory"].shape},
		{Timing{}, planShape.fields["timing_ms"].shape},
		{Error{}, errorShape},
		{ErrorDetail{}, errorShape.fields["error"].shape},
		{Status{}, statusShape},
		{PlanSummary{}, statusShape.fields["plan"].shape},
		{GPU{}, statusShape.fields["gpu"].shape},
	} {
		typ := reflect.TypeOf(c.typ)
		for f := range typ.Fields() {
			key, _, _ := strings.Cut(f.Tag.Get("msgpack"), ",")
			if key == "" || key == "-" {
				continue
			}
			_, ok := c.shape.fields[key]
			assert.True(t, ok, "%s.%s: key %q is not in the decoder's shape (msgs/shape.go)", typ.Name(), f.Name, key)
		}
		for key := range c.shape.fields {
			found := false
			for f := range typ.Fields() {
				if k, _, _ := strings.Cut(f.Tag.Get("msgpack"), ","); k == key {
					found = true
				}
			}
			assert.True(t, found, "%s: the shape names %q, which the type does not carry", typ.Name(), key)
		}
	}
	for _, key := range []string{"frames", "ego_history", "camera_order"} {
		assert.Equal(t, arrayShape, requestShape.fields[key].shape.kind, "InferRequest.%s is an array", key)
	}
}
