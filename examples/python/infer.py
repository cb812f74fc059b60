#!/usr/bin/env python3
"""Ask a vlanode node for a plan over its HTTP API (POST /v1/infer).

Standard library only. The node runs with --http-addr, e.g.

    vlanode serve --model /tmp/tiny --device cpu --name gpu-a --http-addr 127.0.0.1:8080

and this client sends it one observation:

    python3 examples/python/infer.py --url http://127.0.0.1:8080 /tmp/clip
    python3 examples/python/infer.py --url http://127.0.0.1:8080 img1.jpg ... img16.jpg

A clip folder (vlanode clip, or your own: <camera>/<stamp_ns>.jpg|png and
ego.csv) gives the newest frames of each camera and the ego history from
ego.csv; image files are sent as given (camera-major, oldest first) with a
history driving straight at 5 m/s. The request and the answer are described
in docs/http.md.
"""

import argparse
import base64
import json
import os
import sys
import urllib.error
import urllib.request


def get(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)


def post(url, body, timeout):
    """Returns (status, decoded JSON answer); HTTP errors are answers too."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def data_uri(path):
    """A JPEG or PNG file as a data URI, as NVIDIA's service also takes."""
    kind = "png" if path.lower().endswith(".png") else "jpeg"
    with open(path, "rb") as f:
        return "data:image/%s;base64,%s" % (kind, base64.b64encode(f.read()).decode("ascii"))


def stamp_of(name):
    return int(os.path.splitext(name)[0])


def clip_frames(clip, cameras, per_camera):
    """The newest per_camera frames of each camera, camera-major, oldest first; and t0."""
    paths, t0 = [], None
    for cam in cameras:
        names = sorted((n for n in os.listdir(os.path.join(clip, cam)) if n.lower().endswith((".jpg", ".jpeg", ".png"))), key=stamp_of)
        if len(names) < per_camera:
            sys.exit("%s: camera %s has %d frames, the model takes %d" % (clip, cam, len(names), per_camera))
        newest = names[-per_camera:]
        paths += [os.path.join(clip, cam, n) for n in newest]
        t0 = stamp_of(newest[-1]) if t0 is None else min(t0, stamp_of(newest[-1]))
    return paths, t0


def matmul_t(a, b):
    """a^T b for 3x3 row-major lists."""
    return [sum(a[3 * k + r] * b[3 * k + c] for k in range(3)) for r in range(3) for c in range(3)]


def clip_history(clip, t0, rows, period_ns):
    """rows poses from ego.csv, period_ns apart, the last at t0, in the ego frame at t0."""
    with open(os.path.join(clip, "ego.csv")) as f:
        next(f)  # stamp_ns,x,y,z,r00..r22 (world frame, vehicle to world)
        poses = [(int(v[0]), [float(x) for x in v[1:4]], [float(x) for x in v[4:13]]) for v in (line.split(",") for line in f if line.strip())]
    poses.sort(key=lambda p: p[0])

    def at(t):  # the latest pose at or before t
        before = [p for p in poses if p[0] <= t]
        if not before:
            sys.exit("%s: ego.csv has no pose at or before %d" % (clip, t))
        return before[-1]

    _, p0, r0 = at(t0)
    out = []
    for i in range(rows):
        _, p, r = at(t0 - (rows - 1 - i) * period_ns)
        d = [p[j] - p0[j] for j in range(3)]
        xyz = [sum(r0[3 * k + j] * d[k] for k in range(3)) for j in range(3)]  # R0^T (p - p0)
        out.append({"xyz": xyz, "rot": matmul_t(r0, r)})  # R0^T R
    return out


def straight_history(rows, period_s, speed=5.0):
    """Rows of 12 numbers (x, y, z, then the rotation row-major): straight ahead at speed."""
    return [[(i - (rows - 1)) * speed * period_s, 0.0, 0.0, 1, 0, 0, 0, 1, 0, 0, 0, 1] for i in range(rows)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default=os.environ.get("VLANODE_URL", "http://127.0.0.1:8080"), help="the node's HTTP API (default $VLANODE_URL or %(default)s)")
    ap.add_argument("--max-tokens", type=int, default=0, help="most reasoning tokens (0: the model's default)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds to wait for the plan")
    ap.add_argument("--json", action="store_true", help="print the node's answer as JSON")
    ap.add_argument("inputs", nargs="+", help="a clip folder, or the image files camera-major, oldest first")
    args = ap.parse_args()

    base = args.url.rstrip("/")
    model = get(base + "/v1/models")["data"][0]
    cameras, per_camera, rows = model["camera_order"], model["num_frames_per_camera"], model["egomotion_rows"]
    period_ns = int(model["frame_period_ms"] * 1e6)

    if len(args.inputs) == 1 and os.path.isdir(args.inputs[0]):
        clip = args.inputs[0]
        paths, t0 = clip_frames(clip, cameras, per_camera)
        has_ego = os.path.exists(os.path.join(clip, "ego.csv"))
        egomotion = clip_history(clip, t0, rows, period_ns) if has_ego else straight_history(rows, period_ns / 1e9)
    else:
        paths = args.inputs
        egomotion = straight_history(rows, period_ns / 1e9)

    body = {
        "model": model["id"],
        "mode": "trajectory",
        "images": [data_uri(p) for p in paths],
        "camera_order": cameras,
        "num_frames_per_camera": per_camera,
        "egomotion": egomotion,
    }
    if args.max_tokens:
        body["max_tokens"] = args.max_tokens
    status, answer = post(base + "/v1/infer", body, args.timeout)
    if args.json:
        print(json.dumps(answer))
    if status != 200:
        e = answer["error"]  # code, message, and the field it names (when one is at fault)
        sys.exit("HTTP %d %s: %s" % (status, e["code"], e["message"]))
    if not args.json:
        xyz = answer["trajectory"]["xyz"]
        horizon = answer["trajectory"]["dt"] * len(xyz)
        t = answer["timing_ms"]
        print("plan %s from %s (%s): in %.1f s to x=%.1f m, y=%.1f m" % (answer["id"], answer["node"], answer["model"], horizon, xyz[-1][0], xyz[-1][1]))
        print("reasoning: %r" % answer["reasoning"][:60])
        print("ms: preprocess %.0f, vision %.0f, prefill %.0f, decode %.0f, diffusion %.0f, total %.0f" % (
            t["preprocess"], t["vision"], t["prefill"], t["decode"], t["diffusion"], t["total"]))
        for w in answer["warnings"]:
            print("warning: " + w)


if __name__ == "__main__":
    main()
