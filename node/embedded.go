package node

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// maxServerPayload is the largest max_payload nats-server accepts (64 MiB).
const maxServerPayload = 64 << 20

// embeddedReadyTimeout bounds the wait for the embedded server to listen.
const embeddedReadyTimeout = 10 * time.Second

// embedded is a nats-server run inside the node's process, with JetStream.
type embedded struct {
	srv     *server.Server
	host    string // the listen address
	tempDir string // removed at shutdown when the store was temporary
}

// startEmbedded starts a server on o.Host (127.0.0.1 by default) with
// JetStream in o.DataDir.
func startEmbedded(o *Options) (*embedded, error) {
	e := &embedded{host: o.Host}
	if e.host == "" {
		e.host = "127.0.0.1"
	}
	dir := o.DataDir
	if dir == "" {
		d, err := os.MkdirTemp("", "vlanode-nats-")
		if err != nil {
			return nil, fmt.Errorf("embedded server: %w", err)
		}
		dir, e.tempDir = d, d
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("embedded server: data directory: %w", err)
	}
	port := o.Port
	if port == 0 {
		port = server.RANDOM_PORT
	} else if err := portFree(e.host, port); err != nil {
		e.removeTemp()
		return nil, fmt.Errorf("embedded server: %w", err)
	}
	sopts, err := embeddedOptions(o)
	if err != nil {
		e.removeTemp()
		return nil, err
	}
	sopts.Port, sopts.JetStream, sopts.StoreDir = port, true, dir
	srv, err := server.NewServer(sopts)
	if err != nil {
		e.removeTemp()
		return nil, fmt.Errorf("embedded server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(embeddedReadyTimeout) {
		srv.Shutdown()
		e.removeTemp()
		return nil, fmt.Errorf("embedded server: not listening on %s after %v (port taken?)", net.JoinHostPort(e.host, strconv.Itoa(o.Port)), embeddedReadyTimeout)
	}
	e.srv = srv
	return e, nil
}

// embeddedOptions returns the embedded server's options but its port and
// store: the config file's (accounts, users, permissions; docs/security.md)
// with the node's settings over them (its listen host, o.Host, among
// them), or, without one, a single user (or token) that is the node's own
// credentials.
func embeddedOptions(o *Options) (*server.Options, error) {
	sopts := &server.Options{Username: o.Auth.User, Password: o.Auth.Password, Authorization: o.Auth.Token}
	if o.ServerConfig != "" {
		fo, err := server.ProcessConfigFile(o.ServerConfig)
		if err != nil {
			return nil, fmt.Errorf("embedded server: config %s: %w", o.ServerConfig, err)
		}
		sopts = fo
	}
	maxPayload := o.MaxPayload
	if maxPayload == 0 {
		maxPayload = DefaultMaxPayload
	}
	if sopts.ServerName == "" {
		sopts.ServerName = "vlanode-" + o.Name
	}
	sopts.Host = o.Host
	if sopts.Host == "" {
		sopts.Host = "127.0.0.1"
	}
	sopts.NoSigs, sopts.NoLog = true, true
	sopts.MaxPayload = int32(maxPayload)
	// Leave room for a few requests of the largest size in flight to a
	// subscriber before the server calls it slow.
	sopts.MaxPending = max(server.MAX_PENDING_SIZE, 4*maxPayload)
	sopts.MaxControlLine = 4096
	return sopts, nil
}

// portFree checks that host:port can be listened on, so that a taken port
// fails at once rather than after embeddedReadyTimeout.
func portFree(host string, port int) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return ln.Close()
}

// url returns the URL clients on this machine connect to: the listen
// address, or loopback when the server listens on every interface.
func (e *embedded) url() string {
	u := e.srv.ClientURL()
	if ip := net.ParseIP(e.host); ip != nil && ip.IsUnspecified() {
		_, port, _ := net.SplitHostPort(e.listenAddr())
		loop := "127.0.0.1"
		if ip.To4() == nil {
			loop = "::1"
		}
		u = "nats://" + net.JoinHostPort(loop, port)
	}
	return u
}

// listenAddr returns the address the server listens on: the host it was
// given, with the port it got.
func (e *embedded) listenAddr() string {
	_, port, _ := net.SplitHostPort(e.srv.Addr().String())
	return net.JoinHostPort(e.host, port)
}

// shutdown stops the server and removes a temporary store.
func (e *embedded) shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	e.removeTemp()
}

func (e *embedded) removeTemp() {
	if e.tempDir != "" {
		os.RemoveAll(e.tempDir)
	}
}
