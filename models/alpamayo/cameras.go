package alpamayo

import (
	"fmt"
	"slices"
	"strings"

	"vlanode/models"
)

// Camera is one camera of NVIDIA's driving rigs as Alpamayo knows it.
type Camera struct {
	// Name is the camera's name on the wire (the PhysicalAI-AV feature
	// name without its "camera_" prefix).
	Name string
	// Index is the camera's index (camera_name_to_index in
	// load_physical_aiavdataset.py): inputs are ordered by it, and
	// Alpamayo 1.5's prompt names a camera by it.
	Index int
	// Display is the name Alpamayo 1.5's prompt writes before the
	// camera's first image (CAMERA_DISPLAY_NAMES in helper.py).
	Display string
}

// Cameras are the cameras both Alpamayo models know, by index.
var Cameras = []Camera{
	{"cross_left_120fov", 0, "Front left camera"},
	{"front_wide_120fov", 1, "Front camera"},
	{"cross_right_120fov", 2, "Front right camera"},
	{"rear_left_70fov", 3, "Rear left camera"},
	{"rear_tele_30fov", 4, "Rear camera"},
	{"rear_right_70fov", 5, "Rear right camera"},
	{"front_tele_30fov", 6, "Front telephoto camera"},
}

// DefaultCameras are the four cameras of NVIDIA's examples (the release's
// training inputs), in the model's order.
var DefaultCameras = []string{"cross_left_120fov", "front_wide_120fov", "cross_right_120fov", "front_tele_30fov"}

// CameraByName finds a camera by name.
func CameraByName(name string) (Camera, bool) {
	i := slices.IndexFunc(Cameras, func(c Camera) bool { return c.Name == name })
	if i < 0 {
		return Camera{}, false
	}
	return Cameras[i], true
}

// CameraNames lists the names of Cameras.
func CameraNames() []string {
	out := make([]string, len(Cameras))
	for i, c := range Cameras {
		out[i] = c.Name
	}
	return out
}

// displayName is CAMERA_DISPLAY_NAMES[index], or "Camera N" for an index
// it lacks.
func displayName(index int) string {
	for _, c := range Cameras {
		if c.Index == index {
			return c.Display
		}
	}
	return fmt.Sprintf("Camera %d", index)
}

// CameraOrder checks a list of camera names (each known, none twice) and
// returns the order NVIDIA's loader puts them in: by index
// (load_physical_aiavdataset sorts its cameras so). order[i] is the
// position in names of the i-th camera of the model's order, and indices
// their camera indices in that order. The error wraps models.ErrBadInput
// and names the camera.
func CameraOrder(names []string) (order, indices []int, err error) {
	if len(names) == 0 {
		return nil, nil, fmt.Errorf("alpamayo: %w: no cameras", models.ErrBadInput)
	}
	seen := map[string]bool{}
	for i, n := range names {
		if _, ok := CameraByName(n); !ok {
			return nil, nil, fmt.Errorf("alpamayo: %w: unknown camera %q (known: %s)", models.ErrBadInput, n, strings.Join(CameraNames(), ", "))
		}
		if seen[n] {
			return nil, nil, fmt.Errorf("alpamayo: %w: camera %q given twice", models.ErrBadInput, n)
		}
		seen[n] = true
		order = append(order, i)
	}
	index := func(i int) int { c, _ := CameraByName(names[i]); return c.Index }
	slices.SortStableFunc(order, func(a, b int) int { return index(a) - index(b) })
	for _, i := range order {
		indices = append(indices, index(i))
	}
	return order, indices, nil
}
