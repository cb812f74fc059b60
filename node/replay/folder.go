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
	"vlanode/vision/video"
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

// videoJPEGQuality is the JPEG quality a video's decoded frames are
// published at: frames travel as JPEG, as a camera's would, and at 95 the
// loss is below the video codec's own (vision/video's tests).
const videoJPEGQuality = 95

// frameFile is one frame of a clip folder: an image file, or a frame of a
// video file.
type frameFile struct {
	camera string
	stamp  int64
	path   string
	enc    msgs.Encoding
	seq    uint64
	video  *videoFile // nil for an image file
	index  int        // the frame's index in video
}

// videoFile is a video of a clip folder, decoded in order as its frames
// are played.
type videoFile struct {
	path string
	info video.Info
	r    *video.Reader // open from its first frame played to its last
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
	videos []*videoFile // every video of the clip, for Close
	// Skipped counts ticks without enough ego history (they make no request).
	Skipped int
}

// eventIndex points at a frame (tick < 0) or a tick.
type eventIndex struct {
	frame, tick int
	at          int64
}

// OpenFolder reads a clip folder's layout and its videos' headers (not its
// images or frames).
func OpenFolder(dir string, cfg FolderConfig) (*Folder, error) {
	var frames []frameFile
	for _, cam := range cfg.Info.Cameras {
		files, err := cameraFiles(dir, cam)
		if err != nil {
			return nil, err
		}
		if len(files) < cfg.Info.FramesPerCamera {
			return nil, fmt.Errorf("replay: %s: %d frames of camera %s, the model needs %d", dir, len(files), cam, cfg.Info.FramesPerCamera)
		}
		frames = append(frames, files...)
	}
	return newFolder(dir, cfg, frames)
}

// OpenVideo reads one video file as the clip of a model that takes one
// camera: its frames are that camera's, stamped from the number the file
// is named by (<stamp_ns>.mp4, as in a clip folder) or else from 0, and the
// ego poses are ego.csv's beside it. A model of more cameras is refused:
// their videos go in a clip folder.
func OpenVideo(path string, cfg FolderConfig) (*Folder, error) {
	if cams := cfg.Info.Cameras; len(cams) != 1 {
		return nil, fmt.Errorf("replay: %s: a video file holds one camera, and model %s takes %d (%s): put each camera's video in a clip folder as <camera>/<start_ns>%s beside ego.csv (docs/node.md)",
			path, cfg.Info.Model, len(cams), strings.Join(cams, ", "), filepath.Ext(path))
	}
	cam := cfg.Info.Cameras[0]
	name := filepath.Base(path)
	start, err := strconv.ParseInt(strings.TrimSuffix(name, filepath.Ext(name)), 10, 64)
	if err != nil {
		start = 0
	}
	files, err := videoFrames(path, cam, start)
	if err != nil {
		return nil, err
	}
	if len(files) < cfg.Info.FramesPerCamera {
		return nil, fmt.Errorf("replay: %s: %d frames, the model needs %d", path, len(files), cfg.Info.FramesPerCamera)
	}
	return newFolder(filepath.Dir(path), cfg, files)
}

// newFolder orders the frames of the model's cameras, reads dir's ego.csv
// and plans the requests.
func newFolder(dir string, cfg FolderConfig, frames []frameFile) (*Folder, error) {
	if cfg.Every == 0 {
		cfg.Every = 1
	}
	if cfg.Every < 0 {
		return nil, fmt.Errorf("replay: every %d, want ≥ 1", cfg.Every)
	}
	f := &Folder{cfg: cfg, frames: frames}
	for _, fr := range frames {
		if fr.video != nil && fr.index == 0 {
			f.videos = append(f.videos, fr.video)
		}
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

// cameraFiles lists <dir>/<camera>/<stamp_ns>.(jpg|jpeg|png), and the
// frames of each video there, <dir>/<camera>/<stamp_ns>.mp4 (or another
// video extension), named by its first frame's capture time. The frames
// are in time order and numbered.
func cameraFiles(dir, cam string) ([]frameFile, error) {
	entries, err := os.ReadDir(filepath.Join(dir, cam))
	if err != nil {
		return nil, fmt.Errorf("replay: camera %s: %w (want a folder %s/ with one <stamp_ns>.jpg or .png file a frame, or <stamp_ns>.mp4 videos)", cam, err, cam)
	}
	var out []frameFile
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		name := e.Name()
		ext := strings.ToLower(filepath.Ext(name))
		var enc msgs.Encoding
		switch {
		case ext == ".jpg" || ext == ".jpeg":
			enc = msgs.EncodingJPEG
		case ext == ".png":
			enc = msgs.EncodingPNG
		case video.IsVideo(name):
		default:
			continue
		}
		stamp, err := strconv.ParseInt(strings.TrimSuffix(name, filepath.Ext(name)), 10, 64)
		if err != nil {
			what := "frame file is named <stamp_ns>"
			if enc == "" {
				what = "video file is named by its first frame's capture time, <stamp_ns>"
			}
			return nil, fmt.Errorf("replay: %s/%s: a %s%s", cam, name, what, ext)
		}
		path := filepath.Join(dir, cam, name)
		if enc == "" {
			frames, err := videoFrames(path, cam, stamp)
			if err != nil {
				return nil, err
			}
			out = append(out, frames...)
			continue
		}
		out = append(out, frameFile{camera: cam, stamp: stamp, path: path, enc: enc})
	}
	slices.SortFunc(out, func(a, b frameFile) int { return cmp.Compare(a.stamp, b.stamp) })
	for i := range out {
		out[i].seq = uint64(i)
		if i > 0 && out[i].stamp == out[i-1].stamp {
			return nil, fmt.Errorf("replay: camera %s has two frames stamped %d (%s and %s)", cam, out[i].stamp, out[i-1].name(), out[i].name())
		}
	}
	return out, nil
}

// videoFrames returns the frames of the video at path, the first stamped
// start and frame i start + i / FPS (the video's header).
func videoFrames(path, cam string, start int64) ([]frameFile, error) {
	info, err := video.Probe(path)
	if err != nil {
		return nil, fmt.Errorf("replay: camera %s: %w", cam, err)
	}
	v := &videoFile{path: path, info: info}
	out := make([]frameFile, info.Frames)
	for i := range out {
		out[i] = frameFile{camera: cam, stamp: start + int64(info.FrameTime(i)), path: path, enc: msgs.EncodingJPEG, seq: uint64(i), video: v, index: i}
	}
	return out, nil
}

// name says which file a frame comes from, for messages.
func (ff frameFile) name() string {
	if ff.video != nil {
		return fmt.Sprintf("frame %d of %s", ff.index+1, ff.path)
	}
	return ff.path
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

// Close closes the videos still open (image files are read one at a
// time).
func (f *Folder) Close() error {
	for _, v := range f.videos {
		if v.r != nil {
			v.r.Close()
			v.r = nil
		}
	}
	return nil
}

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

// readFrame reads one image file, or decodes one frame of a video, into a
// Frame.
func (f *Folder) readFrame(ff frameFile) (*msgs.Frame, error) {
	if ff.video != nil {
		return readVideoFrame(ff)
	}
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

// readVideoFrame decodes the next frame of ff's video, which must be ff
// (a video's frames are played in order), and encodes it as JPEG. The
// video is opened at its first frame and closed after its last.
func readVideoFrame(ff frameFile) (*msgs.Frame, error) {
	v := ff.video
	if v.r == nil {
		r, err := video.Open(v.path)
		if err != nil {
			return nil, fmt.Errorf("replay: camera %s: %w", ff.camera, err)
		}
		v.r = r
	}
	fr, err := v.r.Next()
	if errors.Is(err, io.EOF) {
		err = fmt.Errorf("%s: ended before frame %d", v.path, ff.index+1)
	}
	if err != nil {
		return nil, fmt.Errorf("replay: camera %s: %w", ff.camera, err)
	}
	if fr.Index != ff.index {
		return nil, fmt.Errorf("replay: %s: decoded frame %d in the place of frame %d", v.path, fr.Index+1, ff.index+1)
	}
	data, err := v.r.JPEG(videoJPEGQuality)
	if err != nil {
		return nil, fmt.Errorf("replay: camera %s: %w", ff.camera, err)
	}
	if fr.Index == v.info.Frames-1 {
		v.r.Close()
		v.r = nil
	}
	return &msgs.Frame{V: msgs.Version, Camera: ff.camera, StampNs: ff.stamp, Seq: ff.seq, Encoding: msgs.EncodingJPEG,
		Width: v.info.Width, Height: v.info.Height, Data: data}, nil
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
