package replay

import (
	"bytes"
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"image"
	_ "image/jpeg" // DecodeConfig for .jpg frames
	_ "image/png"  // DecodeConfig for .png frames
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"vlanode/msgs"
	"vlanode/node"
)

// EgoFile is the name of a clip folder's ego pose file.
const EgoFile = "ego.csv"

// egoHeader is the header ego.csv must start with.
var egoHeader = []string{"stamp_ns", "x", "y", "z", "r00", "r01", "r02", "r10", "r11", "r12", "r20", "r21", "r22"}

// WorldPose is one line of ego.csv: a pose in a fixed world frame.
type WorldPose struct {
	StampNs int64
	XYZ     [3]float64
	Rot     [9]float64 // row-major, vehicle to world
}

// frameFile is one image of a clip folder.
type frameFile struct {
	camera string
	stamp  int64
	path   string
	enc    msgs.Encoding
	seq    uint64
}

// FolderConfig says how to make requests from a folder.
type FolderConfig struct {
	Info  node.EngineInfo // the node's model (node.Discover)
	Every int             // one request every Every frame periods; 0 means 1
}

// Folder is an image-folder clip (see the package comment).
type Folder struct {
	cfg    FolderConfig
	frames []frameFile  // the model's cameras only, by stamp then camera order
	ego    []WorldPose  // by stamp
	ticks  []int64      // request times
	events []eventIndex // frames and ticks merged in time order
	next   int
	// Skipped counts ticks without enough ego history (they make no request).
	Skipped int
}

// eventIndex points at a frame (tick < 0) or a tick.
type eventIndex struct {
	frame, tick int
	at          int64
}

// OpenFolder reads a clip folder's layout (not its images).
func OpenFolder(dir string, cfg FolderConfig) (*Folder, error) {
	if cfg.Every == 0 {
		cfg.Every = 1
	}
	if cfg.Every < 0 {
		return nil, fmt.Errorf("replay: every %d, want ≥ 1", cfg.Every)
	}
	f := &Folder{cfg: cfg}
	for _, cam := range cfg.Info.Cameras {
		files, err := cameraFiles(dir, cam)
		if err != nil {
			return nil, err
		}
		if len(files) < cfg.Info.FramesPerCamera {
			return nil, fmt.Errorf("replay: %s: %d frames of camera %s, the model needs %d", dir, len(files), cam, cfg.Info.FramesPerCamera)
		}
		for i := range files {
			files[i].seq = uint64(i)
		}
		f.frames = append(f.frames, files...)
	}
	order := map[string]int{}
	for i, c := range cfg.Info.Cameras {
		order[c] = i
	}
	slices.SortStableFunc(f.frames, func(a, b frameFile) int {
		if a.stamp != b.stamp {
			return cmp.Compare(a.stamp, b.stamp)
		}
		return order[a.camera] - order[b.camera]
	})
	ego, err := readEgo(filepath.Join(dir, EgoFile))
	switch {
	case errors.Is(err, os.ErrNotExist) && cfg.Info.EgoPoses > 0:
		return nil, fmt.Errorf("replay: %s has no %s, and the model needs %d ego poses", dir, EgoFile, cfg.Info.EgoPoses)
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	f.ego = ego
	f.ticks = f.makeTicks()
	f.merge()
	return f, nil
}

// cameraFiles lists <dir>/<camera>/<stamp_ns>.(jpg|jpeg|png).
func cameraFiles(dir, cam string) ([]frameFile, error) {
	entries, err := os.ReadDir(filepath.Join(dir, cam))
	if err != nil {
		return nil, fmt.Errorf("replay: camera %s: %w (want a folder %s/ with one <stamp_ns>.jpg or .png file a frame)", cam, err, cam)
	}
	var out []frameFile
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		name := e.Name()
		ext := strings.ToLower(filepath.Ext(name))
		var enc msgs.Encoding
		switch ext {
		case ".jpg", ".jpeg":
			enc = msgs.EncodingJPEG
		case ".png":
			enc = msgs.EncodingPNG
		default:
			continue
		}
		stamp, err := strconv.ParseInt(strings.TrimSuffix(name, filepath.Ext(name)), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("replay: %s/%s: a frame file is named <stamp_ns>%s", cam, name, ext)
		}
		out = append(out, frameFile{camera: cam, stamp: stamp, path: filepath.Join(dir, cam, name), enc: enc})
	}
	slices.SortFunc(out, func(a, b frameFile) int { return cmp.Compare(a.stamp, b.stamp) })
	for i := 1; i < len(out); i++ {
		if out[i].stamp == out[i-1].stamp {
			return nil, fmt.Errorf("replay: camera %s has two frames stamped %d", cam, out[i].stamp)
		}
	}
	return out, nil
}

// readEgo reads ego.csv.
func readEgo(path string) ([]WorldPose, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rows, err := csv.NewReader(bytes.NewReader(raw)).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("replay: %s: %w", path, err)
	}
	if len(rows) == 0 || !slices.Equal(rows[0], egoHeader) {
		return nil, fmt.Errorf("replay: %s: the first line must be %s", path, strings.Join(egoHeader, ","))
	}
	out := make([]WorldPose, 0, len(rows)-1)
	for i, row := range rows[1:] {
		line := i + 2
		var p WorldPose
		if p.StampNs, err = strconv.ParseInt(row[0], 10, 64); err != nil {
			return nil, fmt.Errorf("replay: %s:%d: stamp_ns: %w", path, line, err)
		}
		for k := range 12 {
			v, err := strconv.ParseFloat(row[k+1], 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("replay: %s:%d: %s: want a finite number, got %q", path, line, egoHeader[k+1], row[k+1])
			}
			if k < 3 {
				p.XYZ[k] = v
			} else {
				p.Rot[k-3] = v
			}
		}
		out = append(out, p)
	}
	slices.SortStableFunc(out, func(a, b WorldPose) int { return cmp.Compare(a.StampNs, b.StampNs) })
	return out, nil
}

// makeTicks returns the request times: every Every periods from the first
// time every camera has FramesPerCamera frames, to the last frame.
func (f *Folder) makeTicks() []int64 {
	info := f.cfg.Info
	first := int64(math.MinInt64)
	count := map[string]int{}
	for _, fr := range f.frames {
		count[fr.camera]++
		if count[fr.camera] == info.FramesPerCamera {
			first = max(first, fr.stamp)
		}
	}
	last := f.frames[len(f.frames)-1].stamp
	step := int64(f.cfg.Every) * int64(info.FramePeriod)
	var ticks []int64
	for t := first; t <= last; t += step {
		ticks = append(ticks, t)
	}
	return ticks
}

// merge orders frames and ticks by time; a tick comes after the frames of
// its instant.
func (f *Folder) merge() {
	i, k := 0, 0
	for i < len(f.frames) || k < len(f.ticks) {
		if k == len(f.ticks) || (i < len(f.frames) && f.frames[i].stamp <= f.ticks[k]) {
			f.events = append(f.events, eventIndex{frame: i, tick: -1, at: f.frames[i].stamp})
			i++
			continue
		}
		f.events = append(f.events, eventIndex{frame: -1, tick: k, at: f.ticks[k]})
		k++
	}
}

// Len returns the number of events: frames and request ticks.
func (f *Folder) Len() int { return len(f.events) }

// Close does nothing: files are read one at a time.
func (f *Folder) Close() error { return nil }

// Next returns the next frame (read from its file) or request.
func (f *Folder) Next(ctx context.Context) (Event, error) {
	for f.next < len(f.events) {
		if err := ctx.Err(); err != nil {
			return Event{}, err
		}
		e := f.events[f.next]
		f.next++
		if e.tick < 0 {
			fr, err := f.readFrame(f.frames[e.frame])
			if err != nil {
				return Event{}, err
			}
			return Event{Kind: KindFrame, At: e.at, Frame: fr}, nil
		}
		hist, ok := f.egoHistory(e.at)
		if !ok {
			f.Skipped++
			continue
		}
		return Event{Kind: KindRequest, At: e.at, Request: &msgs.InferRequest{EgoHistory: hist}}, nil
	}
	return Event{}, io.EOF
}

// readFrame reads one image file into a Frame.
func (f *Folder) readFrame(ff frameFile) (*msgs.Frame, error) {
	data, err := os.ReadFile(ff.path)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("replay: %s: not a readable %s image: %w", ff.path, ff.enc, err)
	}
	return &msgs.Frame{V: msgs.Version, Camera: ff.camera, StampNs: ff.stamp, Seq: ff.seq, Encoding: ff.enc,
		Width: cfg.Width, Height: cfg.Height, Data: data}, nil
}

// egoHistory returns the model's ego poses for a request at t, in the ego
// frame at t, or false when the clip has no pose at or before a slot.
func (f *Folder) egoHistory(t int64) ([]msgs.EgoPose, bool) {
	n := f.cfg.Info.EgoPoses
	if n == 0 {
		return []msgs.EgoPose{}, true
	}
	period := f.cfg.Info.EgoPeriod
	if period == 0 {
		period = f.cfg.Info.FramePeriod
	}
	world := make([]WorldPose, n)
	for i := range n {
		target := t - int64(n-1-i)*int64(period)
		j, found := slices.BinarySearchFunc(f.ego, target, func(p WorldPose, t int64) int { return cmp.Compare(p.StampNs, t) })
		if !found {
			j-- // the latest pose before target
		}
		if j < 0 {
			return nil, false
		}
		world[i] = f.ego[j]
	}
	return ToEgoFrame(world), true
}

// ToEgoFrame expresses world poses in the frame of the last one (t0): x
// forward, y left, z up of the vehicle at t0, as the protocol wants.
func ToEgoFrame(world []WorldPose) []msgs.EgoPose {
	ref := world[len(world)-1]
	out := make([]msgs.EgoPose, len(world))
	for i, p := range world {
		d := [3]float64{p.XYZ[0] - ref.XYZ[0], p.XYZ[1] - ref.XYZ[1], p.XYZ[2] - ref.XYZ[2]}
		out[i].StampNs = p.StampNs
		for r := range 3 { // R0ᵀ·d and R0ᵀ·R
			for c := range 3 {
				out[i].XYZ[r] += ref.Rot[3*c+r] * d[c]
				var s float64
				for k := range 3 {
					s += ref.Rot[3*k+r] * p.Rot[3*k+c]
				}
				out[i].Rot[3*r+c] = s
			}
		}
	}
	return out
}

// ClipFolders returns the clip folders under dir: dir itself when it is a
// clip folder (it holds a folder of one of cameras, or an ego.csv),
// otherwise its subfolders that are, by name. It fails when there are
// none.
func ClipFolders(dir string, cameras []string) ([]string, error) {
	if isClipFolder(dir, cameras) {
		return []string{dir}, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	var out []string
	for _, e := range entries { // by file name
		sub := filepath.Join(dir, e.Name())
		if e.IsDir() && isClipFolder(sub, cameras) {
			out = append(out, sub)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("replay: %s is neither a clip folder nor a folder of clip folders: no folder of cameras %s and no %s, in it or in its subfolders",
			dir, strings.Join(cameras, ", "), EgoFile)
	}
	return out, nil
}

// isClipFolder says whether dir looks like a clip folder: a camera's
// folder or an ego.csv in it.
func isClipFolder(dir string, cameras []string) bool {
	if st, err := os.Stat(filepath.Join(dir, EgoFile)); err == nil && !st.IsDir() {
		return true
	}
	for _, c := range cameras {
		if st, err := os.Stat(filepath.Join(dir, c)); err == nil && st.IsDir() {
			return true
		}
	}
	return false
}
