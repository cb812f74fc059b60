package node

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"vlanode/node/gpu"
)

// Defaults of the options.
const (
	DefaultQueueBound     = 4                      // requests that may wait while one runs
	DefaultStatusInterval = time.Second            // how often Status is published
	DefaultMaxPayload     = 8 << 20                // the embedded server's max_payload: 16 JPEG frames fit
	DefaultReconnectWait  = 250 * time.Millisecond // between attempts to reach a lost server
	DefaultShutdownGrace  = 30 * time.Second       // Run's limit on finishing in-flight work
)

// Options configure a node. Set them with Option functions.
type Options struct {
	Name    string // the node's name, a single subject token: vla.<name>.*
	NATSURL string // the server to connect to; "" starts an embedded one
	Auth    Auth   // credentials and TLS for the connection

	Host    string // the embedded server's listen address; "" is 127.0.0.1
	Port    int    // the embedded server's port; 0 picks a free one
	DataDir string // the embedded server's JetStream store; "" uses a temporary directory
	// InsecureNoAuth lets the embedded server listen beyond loopback
	// without credentials.
	InsecureNoAuth bool
	// ServerConfig is a nats-server config file for the embedded server:
	// its accounts, users and permissions (docs/security.md). The node
	// connects with Auth as one of its users.
	ServerConfig string

	// MaxPayload is the largest request the node takes, in bytes. With an
	// embedded server it is also the server's max_payload; with an external
	// server the smaller of it and the server's limit applies. 0: the
	// default (embedded) or the server's limit (external).
	MaxPayload int64

	QueueBound     int           // requests that may wait while one runs, ≥ 1
	StatusInterval time.Duration // between Status messages
	MetricsAddr    string        // "host:port" for Prometheus metrics over HTTP; "" serves none
	HTTPAddr       string        // "host:port" for the HTTP API (docs/http.md); "" serves none
	ReconnectWait  time.Duration // between reconnection attempts

	SyncTolerance time.Duration // sync window: how far a frame may be from its slot; 0: half a frame period
	StaleAfter    time.Duration // sync window: age at which a received frame is dropped; 0: (frames+1) periods
	RingCapacity  int           // frames kept per camera; 0: ingest.DefaultCapacity
	RingBytes     int64         // frame data kept per camera; 0: ingest.DefaultMaxBytes
	MaxFrameSkew  time.Duration // how far ahead of the newest frame a frame may be stamped; 0: ingest's default

	Jobs *JobsConfig // the jobs path (WithJobs); nil: off

	Control *ControlConfig // vla.<node>.control (WithControl); nil: every control request is refused

	GPU    gpu.Telemetry // GPU telemetry for Status and metrics; nil: no GPU
	Logger *slog.Logger  // nil: discard

	now func() time.Time // the clock; tests replace it
}

// Option sets one field of Options.
type Option func(*Options) error

// WithName sets the node's name (required).
func WithName(name string) Option {
	return func(o *Options) error {
		if err := checkToken("node", name); err != nil {
			return err
		}
		o.Name = name
		return nil
	}
}

// WithNATSURL connects to an external NATS server instead of starting an
// embedded one. The URL may list several servers, comma-separated.
func WithNATSURL(url string) Option {
	return func(o *Options) error { o.NATSURL = url; return nil }
}

// WithEmbeddedServer sets the embedded server's port (0 picks a free one)
// and its JetStream data directory ("" uses a temporary directory removed
// at shutdown). It listens on 127.0.0.1 unless WithListenHost says
// otherwise.
func WithEmbeddedServer(port int, dataDir string) Option {
	return func(o *Options) error {
		if port < 0 || port > 65535 {
			return fmt.Errorf("embedded server port %d out of range 0..65535", port)
		}
		o.Port, o.DataDir = port, dataDir
		return nil
	}
}

// WithListenHost sets the embedded server's listen address (an IP or a host
// name; "0.0.0.0" is every interface). Beyond loopback the server needs
// credentials (WithUserInfo or WithToken) unless insecureNoAuth is true:
// then anyone who reaches the port may publish frames and requests.
func WithListenHost(host string, insecureNoAuth bool) Option {
	return func(o *Options) error {
		o.Host, o.InsecureNoAuth = host, insecureNoAuth
		return nil
	}
}

// WithEmbeddedConfig gives the embedded server a nats-server config file
// (accounts, users, permissions); the node's listen address (WithListenHost,
// WithEmbeddedServer), store and max payload still apply, and the node
// connects with its own credentials (WithUserInfo, WithToken) as one of the
// file's users.
func WithEmbeddedConfig(file string) Option {
	return func(o *Options) error { o.ServerConfig = file; return nil }
}

// WithMaxPayload sets the largest request the node takes (see
// Options.MaxPayload).
func WithMaxPayload(bytes int64) Option {
	return func(o *Options) error {
		if bytes < 0 || bytes > maxServerPayload {
			return fmt.Errorf("max payload %d out of range 0..%d", bytes, maxServerPayload)
		}
		o.MaxPayload = bytes
		return nil
	}
}

// WithQueueBound sets how many requests may wait while one runs (≥ 1);
// past it a request is answered overloaded.
func WithQueueBound(n int) Option {
	return func(o *Options) error {
		if n < 1 {
			return fmt.Errorf("queue bound %d, want ≥ 1", n)
		}
		o.QueueBound = n
		return nil
	}
}

// WithStatusInterval sets how often Status is published.
func WithStatusInterval(d time.Duration) Option {
	return func(o *Options) error {
		if d <= 0 {
			return fmt.Errorf("status interval %v, want > 0", d)
		}
		o.StatusInterval = d
		return nil
	}
}

// WithMetricsAddr serves Prometheus metrics at http://addr/metrics.
func WithMetricsAddr(addr string) Option {
	return func(o *Options) error { o.MetricsAddr = addr; return nil }
}

// WithHTTPAddr serves the HTTP API (POST /v1/infer and its companions,
// docs/http.md) at http://addr.
func WithHTTPAddr(addr string) Option {
	return func(o *Options) error { o.HTTPAddr = addr; return nil }
}

// WithReconnectWait sets the wait between attempts to reach a lost server.
func WithReconnectWait(d time.Duration) Option {
	return func(o *Options) error {
		if d <= 0 {
			return fmt.Errorf("reconnect wait %v, want > 0", d)
		}
		o.ReconnectWait = d
		return nil
	}
}

// WithSyncWindow sets the sync window's tolerance and staleness (0 keeps a
// default; see package ingest) and the frames kept per camera.
func WithSyncWindow(tolerance, staleAfter time.Duration, ringCapacity int) Option {
	return func(o *Options) error {
		if tolerance < 0 || staleAfter < 0 || ringCapacity < 0 {
			return errors.New("sync window: negative tolerance, staleness or capacity")
		}
		o.SyncTolerance, o.StaleAfter, o.RingCapacity = tolerance, staleAfter, ringCapacity
		return nil
	}
}

// WithFrameLimits sets how far ahead of a camera's newest frame a published
// frame may be stamped (0: the longer of 1 s and two stale-after windows)
// and how many bytes of frame data each camera keeps (0:
// ingest.DefaultMaxBytes). Frames beyond either are dropped and counted.
func WithFrameLimits(maxSkew time.Duration, ringBytes int64) Option {
	return func(o *Options) error {
		if maxSkew < 0 || ringBytes < 0 {
			return errors.New("frame limits: negative skew or ring bytes")
		}
		o.MaxFrameSkew, o.RingBytes = maxSkew, ringBytes
		return nil
	}
}

// WithGPU reports t's telemetry in Status and metrics. The node does not
// close it.
func WithGPU(t gpu.Telemetry) Option {
	return func(o *Options) error { o.GPU = t; return nil }
}

// WithControl lets authenticated control requests on vla.<node>.control
// change the budget (the engine must be a Rebudgeter), and with c.Auto
// lets the budget follow the GPU's free memory.
func WithControl(c ControlConfig) Option {
	return func(o *Options) error {
		if c.Auto != nil && c.Auto.Sample == nil {
			return errors.New("node: control: auto budget without a sample function")
		}
		o.Control = &c
		return nil
	}
}

// WithLogger logs through l.
func WithLogger(l *slog.Logger) Option {
	return func(o *Options) error { o.Logger = l; return nil }
}

// WithUserInfo authenticates with a user and password. Without an external
// server, the embedded server requires them too.
func WithUserInfo(user, password string) Option {
	return func(o *Options) error { o.Auth.User, o.Auth.Password = user, password; return nil }
}

// WithToken authenticates with a token. Without an external server, the
// embedded server requires it too.
func WithToken(token string) Option {
	return func(o *Options) error { o.Auth.Token = token; return nil }
}

// WithNkeySeed authenticates with the nkey seed in file.
func WithNkeySeed(file string) Option {
	return func(o *Options) error { o.Auth.NkeySeedFile = file; return nil }
}

// WithCredentials authenticates with a creds file (user JWT and nkey seed).
func WithCredentials(file string) Option {
	return func(o *Options) error { o.Auth.CredsFile = file; return nil }
}

// WithTLS connects over TLS, trusting the CA certificates in caFile (""
// trusts the system's) and presenting the client certificate certFile with
// keyFile when both are given.
func WithTLS(caFile, certFile, keyFile string) Option {
	return func(o *Options) error {
		o.Auth.TLSCA, o.Auth.TLSCert, o.Auth.TLSKey = caFile, certFile, keyFile
		o.Auth.TLS = true
		return nil
	}
}

// withClock replaces the node's clock (tests).
func withClock(now func() time.Time) Option {
	return func(o *Options) error { o.now = now; return nil }
}

// buildOptions applies opts over the defaults and checks the result.
func buildOptions(opts []Option) (Options, error) {
	o := Options{
		QueueBound:     DefaultQueueBound,
		StatusInterval: DefaultStatusInterval,
		ReconnectWait:  DefaultReconnectWait,
		now:            time.Now,
	}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return o, fmt.Errorf("node: %w", err)
		}
	}
	if o.Name == "" {
		return o, errors.New("node: a name is required (WithName)")
	}
	if err := o.Auth.Check(o.NATSURL == ""); err != nil {
		return o, fmt.Errorf("node: %w", err)
	}
	if o.NATSURL == "" && !Loopback(o.Host) && o.Auth.User == "" && o.Auth.Token == "" && !o.InsecureNoAuth {
		return o, fmt.Errorf("node: the embedded NATS server would listen on %s without authentication: anyone who reaches it could publish frames and requests; give a user and password or a token (--user/--password, --token), or accept that with --insecure-no-auth", o.Host)
	}
	if o.ServerConfig != "" && o.NATSURL != "" {
		return o, errors.New("node: a server config file is for the embedded server; with an external server (WithNATSURL) configure that server")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o, nil
}

// Loopback reports whether host, a listen address, reaches only this
// machine: "" (127.0.0.1), localhost, or a loopback IP.
func Loopback(host string) bool {
	if host == "" || host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
