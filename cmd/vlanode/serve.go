package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"vlanode/node"
	"vlanode/node/gpu"
	"vlanode/residency"
)

// engineSpec is how serve obtains its model engine. The model pipeline fills
// it in where commands() registers serve; until then serve refuses to start
// rather than pretend to serve a model.
type engineSpec struct {
	// flags registers the engine's own flags (model directory, device, …);
	// nil when it has none.
	flags func(fs *flag.FlagSet)
	// build constructs the engine after the flags are parsed. env carries
	// what serve resolved for it.
	build func(ctx context.Context, env engineEnv) (node.Engine, error)
}

// engineEnv is what serve hands to engineSpec.build.
type engineEnv struct {
	BudgetBytes uint64        // --budget resolved (auto: free VRAM − --budget-reserve); 0: unlimited
	GPU         int           // --gpu resolved: the CUDA ordinal; -1: none
	Telemetry   gpu.Telemetry // NVML for that GPU, or nil
	Log         *slog.Logger
}

// errNoEngine is serve's answer while no engine is wired in.
const errNoEngine = "no model engine yet: serve needs the model pipeline (vision encoder, VLM, action expert), which is not wired into this binary"

// natsFlags are the connection flags that serve, replay and record share.
type natsFlags struct {
	url     string
	fromEnv bool // url came from $NATS_URL
	auth    node.Auth
}

// defaultNATSURL is where replay and record connect without --nats-url or
// $NATS_URL: serve's embedded server on this machine.
const defaultNATSURL = "nats://127.0.0.1:4222"

// useEnv takes the URL from $NATS_URL, as the nats CLI does, when
// --nats-url was not given.
func (f *natsFlags) useEnv() {
	if f.url == "" {
		if u := os.Getenv("NATS_URL"); u != "" {
			f.url, f.fromEnv = u, true
		}
	}
}

// clientURL is the URL of a client command (replay, record): --nats-url,
// $NATS_URL, or the local default.
func (f *natsFlags) clientURL() string {
	f.useEnv()
	if f.url == "" {
		f.url = defaultNATSURL
	}
	return f.url
}

func (f *natsFlags) register(fs *flag.FlagSet, urlHelp string) {
	fs.StringVar(&f.url, "nats-url", "", urlHelp+" (default: $NATS_URL)")
	fs.StringVar(&f.auth.User, "user", "", "NATS user (with --password, or $VLANODE_NATS_PASSWORD)")
	fs.StringVar(&f.auth.Password, "password", "", "NATS password")
	fs.StringVar(&f.auth.Token, "token", "", "NATS token (or $VLANODE_NATS_TOKEN)")
	fs.StringVar(&f.auth.NkeySeedFile, "nkey", "", "file with an nkey seed to authenticate with")
	fs.StringVar(&f.auth.CredsFile, "creds", "", "NATS creds file (user JWT and seed)")
	fs.BoolVar(&f.auth.TLS, "tls", false, "connect over TLS (implied by the --tls-* flags)")
	fs.StringVar(&f.auth.TLSCA, "tls-ca", "", "PEM file of CA certificates to trust (default: the system's)")
	fs.StringVar(&f.auth.TLSCert, "tls-cert", "", "PEM client certificate (with --tls-key)")
	fs.StringVar(&f.auth.TLSKey, "tls-key", "", "PEM client key (with --tls-cert)")
}

// resolve reads secrets from the environment when their flags are empty
// and checks the combination.
func (f *natsFlags) resolve(embedded bool) error {
	if f.auth.Password == "" {
		f.auth.Password = os.Getenv("VLANODE_NATS_PASSWORD")
	}
	if f.auth.Token == "" {
		f.auth.Token = os.Getenv("VLANODE_NATS_TOKEN")
	}
	if err := f.auth.Check(embedded); err != nil {
		return usageError{err.Error()}
	}
	return nil
}

// options returns the node options for the connection.
func (f *natsFlags) options() []node.Option {
	a := f.auth
	var opts []node.Option
	if f.url != "" {
		opts = append(opts, node.WithNATSURL(f.url))
	}
	switch {
	case a.User != "":
		opts = append(opts, node.WithUserInfo(a.User, a.Password))
	case a.Token != "":
		opts = append(opts, node.WithToken(a.Token))
	case a.NkeySeedFile != "":
		opts = append(opts, node.WithNkeySeed(a.NkeySeedFile))
	case a.CredsFile != "":
		opts = append(opts, node.WithCredentials(a.CredsFile))
	}
	if a.TLS || a.TLSCA != "" || a.TLSCert != "" {
		opts = append(opts, node.WithTLS(a.TLSCA, a.TLSCert, a.TLSKey))
	}
	return opts
}

// byteSize is a flag of bytes: 1048576, 8MiB, 16G (10^9), 512KiB.
type byteSize int64

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"B", 1},
}

// parseBytes parses a size with an optional unit (binary KiB…TiB, decimal
// K…T, or B).
func parseBytes(s string) (int64, error) {
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 || v*float64(mult) > 1<<62 {
		return 0, fmt.Errorf("%q is not a size (e.g. 1048576, 512KiB, 8MiB, 16G)", s)
	}
	return int64(v * float64(mult)), nil
}

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(s string) error {
	v, err := parseBytes(s)
	if err != nil {
		return err
	}
	*b = byteSize(v)
	return nil
}

// budgetFlag is --budget: "unlimited" (or 0), "auto", or a size.
type budgetFlag struct {
	auto  bool
	bytes int64
}

func (b *budgetFlag) String() string {
	switch {
	case b == nil:
		return ""
	case b.auto:
		return "auto"
	case b.bytes == 0:
		return "unlimited"
	}
	return strconv.FormatInt(b.bytes, 10)
}

func (b *budgetFlag) Set(s string) error {
	if s == "auto" {
		*b = budgetFlag{auto: true}
		return nil
	}
	v, err := residency.ParseBudget(s) // the budget syntax of every command
	if err != nil {
		return fmt.Errorf("want auto, unlimited or a size: %w", err)
	}
	*b = budgetFlag{bytes: v}
	return nil
}

// serveConfig is serve's command line, parsed.
type serveConfig struct {
	nats          natsFlags
	name          string
	listen        string // --listen HOST:PORT
	port          int
	insecure      bool // --insecure-no-auth
	httpAddr      string
	dataDir       string
	maxPayload    byteSize
	metricsAddr   string
	queueBound    int
	statusEvery   time.Duration
	grace         time.Duration
	syncTolerance time.Duration
	staleAfter    time.Duration
	ringCapacity  int
	ringBytes     byteSize
	frameSkew     time.Duration
	serverConfig  string
	jobs          bool
	jobAckWait    time.Duration
	gpu           string // --gpu: a CUDA ordinal, a UUID, or -1
	budget        budgetFlag
	budgetFile    string // --budget-file: the budget, read at start and on SIGHUP
	reserve       byteSize
	controlToken  string // --control-token: authenticates vla.<name>.control
	autoInterval  time.Duration
	logLevel      string
}

// parseServe parses serve's flags (and the engine's).
func parseServe(args []string, stderr io.Writer, spec engineSpec) (*serveConfig, error) {
	fs := newFlags("serve", stderr)
	c := &serveConfig{maxPayload: node.DefaultMaxPayload, reserve: gpu.DefaultReserve}
	c.nats.register(fs, "NATS server to connect to (comma-separated list); empty: start an embedded server with JetStream")
	fs.StringVar(&c.name, "name", defaultNodeName(), "node name: one NATS subject token (vla.<name>.*)")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:4222", "embedded server: HOST:PORT to listen on (0.0.0.0:4222 for every interface, which needs --user/--password or --token; port 0: any free one)")
	fs.IntVar(&c.port, "port", 4222, "embedded server: port on 127.0.0.1, short for --listen 127.0.0.1:PORT")
	fs.BoolVar(&c.insecure, "insecure-no-auth", false, "let the embedded server listen beyond loopback without credentials: anyone who reaches the port can send frames and requests")
	fs.StringVar(&c.httpAddr, "http-addr", "", "serve the HTTP API (POST /v1/infer, health, models, metrics; docs/http.md) at HOST:PORT, e.g. 127.0.0.1:8080; empty: off")
	fs.StringVar(&c.dataDir, "data-dir", defaultDataDir(), "embedded server: JetStream store directory")
	fs.Var(&c.maxPayload, "max-payload", "largest request in bytes (e.g. 8MiB); the embedded server's max_payload; with --nats-url, capped by the server's")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9464); empty: off")
	fs.IntVar(&c.queueBound, "queue-bound", node.DefaultQueueBound, "requests that may wait while one runs; past it: overloaded")
	fs.DurationVar(&c.statusEvery, "status-interval", node.DefaultStatusInterval, "how often Status is published")
	fs.DurationVar(&c.grace, "shutdown-grace", node.DefaultShutdownGrace, "on SIGTERM/SIGINT: how long the inference in flight may take to finish")
	fs.DurationVar(&c.syncTolerance, "sync-tolerance", 0, "sync window: how far a frame may be from its slot (0: half a frame period)")
	fs.DurationVar(&c.staleAfter, "stale-after", 0, "sync window: a frame received longer ago is dropped (0: (frames per camera + 1) frame periods)")
	fs.IntVar(&c.ringCapacity, "ring-capacity", 0, "frames kept per camera (0: 32)")
	fs.Var(&c.ringBytes, "ring-bytes", "frame data kept per camera (0: 32MiB); past it the oldest frames go")
	fs.DurationVar(&c.frameSkew, "max-frame-skew", 0, "a published frame stamped further ahead of its camera's newest frame is dropped (0: the longer of 1s and 2 × --stale-after)")
	fs.StringVar(&c.serverConfig, "nats-config", "", "embedded server: a nats-server config file with accounts, users and permissions (docs/security.md); serve connects as --user")
	fs.BoolVar(&c.jobs, "jobs", false, "also take jobs from the JetStream work queue vla.jobs, answers stored on vla.results.<id> (docs/node.md)")
	fs.DurationVar(&c.jobAckWait, "job-ack-wait", node.DefaultJobAckWait, "jobs: how long a job may go without the node's heartbeat before another node gets it")
	fs.StringVar(&c.gpu, "gpu", "0", "the GPU of the engine and of NVML telemetry: a CUDA ordinal (as CUDA_VISIBLE_DEVICES numbers them) or a UUID (GPU-…, nvidia-smi -L); -1: none")
	fs.Var(&c.budget, "budget", "VRAM budget: a size (16G, 8GiB), unlimited, or auto (free VRAM minus --budget-reserve)")
	fs.Var(&c.reserve, "budget-reserve", "VRAM --budget auto leaves free (CUDA context and headroom)")
	fs.StringVar(&c.budgetFile, "budget-file", "", "a file holding the budget (a size, unlimited or auto: its first line that is not a # comment), read at start instead of --budget and again on SIGHUP")
	fs.StringVar(&c.controlToken, "control-token", "", "token that authenticates budget changes on vla.<name>.control (or $VLANODE_CONTROL_TOKEN); empty: control requests are refused")
	fs.DurationVar(&c.autoInterval, "budget-auto-interval", node.DefaultAutoInterval, "--budget auto: how often the GPU's free memory is read")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	if spec.flags != nil {
		spec.flags(fs)
	}
	if err := parse(fs, args); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := c.resolveListen(set); err != nil {
		return nil, err
	}
	if c.budgetFile != "" {
		if set["budget"] {
			return nil, usagef("give --budget or --budget-file, not both")
		}
		r, err := readBudgetFile(c.budgetFile)
		if err != nil {
			return nil, err
		}
		c.budget = budgetFlag{auto: r.Auto, bytes: int64(r.Bytes)}
	}
	if c.controlToken == "" {
		c.controlToken = os.Getenv("VLANODE_CONTROL_TOKEN")
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	return c, nil
}

// resolveListen settles where the node's NATS server is: --nats-url, else
// $NATS_URL, else the embedded server at --listen (or 127.0.0.1:--port).
func (c *serveConfig) resolveListen(set map[string]bool) error {
	embeddedFlags := set["listen"] || set["port"] || set["insecure-no-auth"]
	if c.nats.url != "" && embeddedFlags {
		return usagef("--listen, --port and --insecure-no-auth are for the embedded server; --nats-url connects to another one")
	}
	if !embeddedFlags {
		c.nats.useEnv()
	}
	if set["listen"] && set["port"] {
		return usagef("give --listen HOST:PORT or --port PORT, not both")
	}
	if set["port"] {
		c.listen = net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port))
	}
	host, port, err := net.SplitHostPort(c.listen)
	if err != nil {
		return usagef("--listen %q: want HOST:PORT (e.g. 0.0.0.0:4222): %v", c.listen, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return usagef("--listen %q: port out of range 0..65535", c.listen)
	}
	c.port = p
	c.listen = net.JoinHostPort(host, port)
	return nil
}

// listenHost is the host part of --listen.
func (c *serveConfig) listenHost() string {
	host, _, _ := net.SplitHostPort(c.listen)
	return host
}

func (c *serveConfig) check() error {
	switch {
	case c.queueBound < 1:
		return usagef("--queue-bound must be at least 1")
	case c.maxPayload < 0 || c.maxPayload > 64<<20:
		return usagef("--max-payload must be at most 64MiB (the NATS server's limit)")
	case c.statusEvery <= 0 || c.grace < 0:
		return usagef("--status-interval must be positive and --shutdown-grace not negative")
	case c.syncTolerance < 0 || c.staleAfter < 0 || c.ringCapacity < 0 || c.frameSkew < 0:
		return usagef("--sync-tolerance, --stale-after, --ring-capacity and --max-frame-skew must not be negative")
	case c.serverConfig != "" && c.nats.url != "":
		return usagef("--nats-config configures the embedded server; with --nats-url configure that server")
	case c.jobAckWait < 100*time.Millisecond:
		return usagef("--job-ack-wait must be at least 100ms")
	case c.autoInterval < 10*time.Millisecond:
		return usagef("--budget-auto-interval must be at least 10ms")
	}
	if _, err := resolveGPU(c.gpu, nil, errNoCUDAYet); err != nil {
		return err
	}
	if err := node.WithName(c.name)(&node.Options{}); err != nil {
		return usagef("--name: %v", err)
	}
	if _, err := parseLevel(c.logLevel); err != nil {
		return usageError{err.Error()}
	}
	if err := c.nats.resolve(c.nats.url == ""); err != nil {
		return err
	}
	a := c.nats.auth
	if c.nats.url == "" && !node.Loopback(c.listenHost()) && a.User == "" && a.Token == "" && !c.insecure {
		return usagef("--listen %s reaches beyond this machine: give --user and --password (or $VLANODE_NATS_PASSWORD) or --token, or --insecure-no-auth to let anyone who reaches the port send frames and requests", c.listen)
	}
	return nil
}

// options returns the node options of the command line.
func (c *serveConfig) options(log *slog.Logger, tel gpu.Telemetry) []node.Option {
	opts := append(c.nats.options(),
		node.WithName(c.name),
		node.WithMaxPayload(int64(c.maxPayload)),
		node.WithQueueBound(c.queueBound),
		node.WithStatusInterval(c.statusEvery),
		node.WithMetricsAddr(c.metricsAddr),
		node.WithSyncWindow(c.syncTolerance, c.staleAfter, c.ringCapacity),
		node.WithFrameLimits(c.frameSkew, int64(c.ringBytes)),
		node.WithLogger(log),
	)
	if c.nats.url == "" {
		opts = append(opts, node.WithEmbeddedServer(c.port, c.dataDir), node.WithListenHost(c.listenHost(), c.insecure))
	}
	if c.httpAddr != "" {
		opts = append(opts, node.WithHTTPAddr(c.httpAddr))
	}
	if c.serverConfig != "" {
		opts = append(opts, node.WithEmbeddedConfig(c.serverConfig))
	}
	if c.jobs {
		opts = append(opts, node.WithJobs(node.JobsConfig{AckWait: c.jobAckWait}))
	}
	if tel != nil {
		opts = append(opts, node.WithGPU(tel))
	}
	return opts
}

// serveCommand returns the serve command for an engine.
func serveCommand(spec engineSpec) func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		c, err := parseServe(args, stderr, spec)
		if err != nil {
			return err
		}
		if spec.build == nil {
			return fmt.Errorf("%s", errNoEngine)
		}
		level, _ := parseLevel(c.logLevel)
		log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
		sel, err := selectGPU(c.gpu)
		if err != nil {
			return err
		}
		tel := openTelemetry(sel, log)
		if tel != nil {
			defer tel.Close()
		}
		budget := uint64(c.budget.bytes)
		if c.budget.auto {
			if budget, err = gpu.ReadAutoBudget(tel, uint64(c.reserve)); err != nil {
				return fmt.Errorf("--budget auto: %w", err)
			}
			log.Info("budget auto", "free_minus_reserve", budget, "reserve", int64(c.reserve))
		}
		ordinal := sel.ordinal
		if sel.none {
			ordinal = -1
		}
		// Wrong credentials are found now, not after the model has loaded.
		if err := node.CheckCredentials(ctx, c.options(log, tel)...); err != nil {
			return err
		}
		engine, err := spec.build(ctx, engineEnv{BudgetBytes: budget, GPU: ordinal, Telemetry: tel, Log: log})
		if err != nil {
			return fmt.Errorf("loading the model: %w", err)
		}
		// SIGHUP re-reads --budget-file; caught from now on, so that it
		// never stops the node.
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		abandoned := false
		if cl, ok := engine.(io.Closer); ok { // an engine that holds memory or files may say so
			defer func() {
				if !abandoned { // an inference left running still uses it; the process is exiting
					cl.Close()
				}
			}()
		}
		n, err := node.Start(ctx, engine, append(c.options(log, tel), c.controlOption(tel, engine))...)
		if err != nil {
			return err
		}
		hupDone := make(chan struct{})
		defer func() { <-hupDone }()
		go func() {
			defer close(hupDone)
			watchBudgetFile(ctx, n, c.budgetFile, hup, log)
		}()
		fmt.Fprintf(stdout, "vlanode: node %s serving %s on %s (vla.infer, %s)\n", n.Name(), engine.Info().Model, n.URL(), node.InferSubject(n.Name()))
		if c.nats.fromEnv {
			fmt.Fprintf(stdout, "vlanode: NATS server from $NATS_URL\n")
		}
		if l := n.ListenAddr(); l != "" && !node.Loopback(c.listenHost()) {
			fmt.Fprintf(stdout, "vlanode: the embedded NATS server listens on %s\n", l)
			if c.insecure && c.nats.auth.User == "" && c.nats.auth.Token == "" {
				fmt.Fprintf(stderr, "vlanode: WARNING: --insecure-no-auth: the NATS server on %s takes frames and requests from anyone who can reach it, without credentials\n", l)
			}
		}
		if a := n.HTTPAddr(); a != "" {
			fmt.Fprintf(stdout, "vlanode: HTTP API on http://%s (POST /v1/infer; docs/http.md)\n", a)
		}
		if a := n.MetricsAddr(); a != "" {
			fmt.Fprintf(stdout, "vlanode: metrics on http://%s/metrics\n", a)
		}
		err = n.Run(ctx, c.grace)
		abandoned = errors.Is(err, node.ErrInferenceAbandoned)
		return err
	}
}

// controlOption configures the control subject: the token, and with GPU
// telemetry the auto budget's free-memory source (NVML's free memory, and
// what this process holds: NVML's figure for it, else what the engine's
// device allocator counts).
func (c *serveConfig) controlOption(tel gpu.Telemetry, eng node.Engine) node.Option {
	cc := node.ControlConfig{Token: c.controlToken}
	if tel != nil {
		cc.Auto = &node.AutoConfig{
			Sample: func() (free, held uint64, err error) {
				g, err := tel.Read()
				if err != nil {
					return 0, 0, err
				}
				if g.MemoryFreeBytes == 0 {
					return 0, 0, errors.New("the GPU reported no free-memory figure")
				}
				if pm, ok := tel.(interface{ ProcessMemory(int) (uint64, error) }); ok {
					held, _ = pm.ProcessMemory(os.Getpid())
				}
				if d, ok := eng.(interface{ DeviceBytes() uint64 }); ok && held == 0 {
					held = d.DeviceBytes()
				}
				return g.MemoryFreeBytes, held, nil
			},
			Reserve: uint64(c.reserve), Interval: c.autoInterval, On: c.budget.auto,
		}
	}
	return node.WithControl(cc)
}

// readBudgetFile reads --budget-file: its first line that is neither
// empty nor a # comment, as a control request's budget.
func readBudgetFile(path string) (node.BudgetRequest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return node.BudgetRequest{}, fmt.Errorf("--budget-file: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r, err := node.ParseBudgetRequest(line, node.BudgetFromSIGHUP)
		if err != nil {
			return node.BudgetRequest{}, fmt.Errorf("--budget-file %s: %w", path, err)
		}
		return r, nil
	}
	return node.BudgetRequest{}, fmt.Errorf("--budget-file %s: no budget in it (write a size such as 8GiB, unlimited or auto)", path)
}

// watchBudgetFile applies --budget-file again at each SIGHUP until ctx
// ends, logging the outcome; without a file it says there is none.
func watchBudgetFile(ctx context.Context, n *node.Node, path string, hup <-chan os.Signal, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		if path == "" {
			log.Warn("SIGHUP: no --budget-file to re-read; the budget stays")
			continue
		}
		r, err := readBudgetFile(path)
		if err != nil {
			log.Error("SIGHUP: the budget stays", "err", err)
			continue
		}
		reply, err := n.SetBudget(ctx, r)
		if err != nil {
			log.Error("SIGHUP: the budget stays", "file", path, "err", err)
			continue
		}
		log.Info("SIGHUP: budget from "+path, "budget_bytes", reply.BudgetBytes, "previous_bytes", reply.PreviousBudgetBytes,
			"auto", reply.Auto, "changed", reply.Changed)
	}
}

// errNoCUDAYet stands for the CUDA devices while the command line is
// checked: --gpu's form is checked then, its GPU once serve starts.
var errNoCUDAYet = errors.New("the GPUs are looked up when serve starts")

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// defaultNodeName is the host name, made a valid subject token.
func defaultNodeName() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "vlanode"
	}
	h, _, _ = strings.Cut(h, ".")
	return strings.Map(func(r rune) rune {
		if r == '*' || r == '>' || r <= ' ' {
			return '-'
		}
		return r
	}, h)
}

// defaultDataDir is where the embedded server keeps JetStream by default.
func defaultDataDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "vlanode", "jetstream")
	}
	return filepath.Join(os.TempDir(), "vlanode-jetstream")
}
