package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Auth holds the credentials and TLS settings for a NATS connection. At most
// one of user/password, token, nkey seed and creds file may be set.
type Auth struct {
	User, Password string // user and password
	Token          string // token
	NkeySeedFile   string // file holding an nkey seed (SU…)
	CredsFile      string // creds file: user JWT and nkey seed (decentralized auth)

	TLS     bool   // use TLS (implied by any of the three files below)
	TLSCA   string // CA certificates to trust (PEM); "" trusts the system's
	TLSCert string // client certificate (PEM), with TLSKey
	TLSKey  string // client key (PEM), with TLSCert
}

// Check rejects combinations that cannot work, without reading any file.
// embedded says the node starts its own server, which takes user/password
// or a token but no nkeys, creds or TLS.
func (a Auth) Check(embedded bool) error {
	n := 0
	for _, set := range []bool{a.User != "" || a.Password != "", a.Token != "", a.NkeySeedFile != "", a.CredsFile != ""} {
		if set {
			n++
		}
	}
	switch {
	case n > 1:
		return errors.New("auth: give one of user/password, token, nkey seed and creds file")
	case a.User == "" && a.Password != "":
		return errors.New("auth: a password needs a user")
	case (a.TLSCert == "") != (a.TLSKey == ""):
		return errors.New("auth: a TLS client certificate needs its key, and a key its certificate")
	case embedded && (a.NkeySeedFile != "" || a.CredsFile != ""):
		return errors.New("auth: nkey seeds and creds files need an external server (--nats-url); the embedded server takes a user and password or a token")
	case embedded && a.tls():
		return errors.New("auth: TLS needs an external server (--nats-url); the embedded server has no TLS")
	}
	return nil
}

func (a Auth) tls() bool { return a.TLS || a.TLSCA != "" || a.TLSCert != "" || a.TLSKey != "" }

// NATSOptions returns the nats.go options that carry a.
func (a Auth) NATSOptions() ([]nats.Option, error) {
	if err := a.Check(false); err != nil {
		return nil, err
	}
	var opts []nats.Option
	switch {
	case a.User != "":
		opts = append(opts, nats.UserInfo(a.User, a.Password))
	case a.Token != "":
		opts = append(opts, nats.Token(a.Token))
	case a.NkeySeedFile != "":
		o, err := nats.NkeyOptionFromSeed(a.NkeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("auth: nkey seed %s: %w", a.NkeySeedFile, err)
		}
		opts = append(opts, o)
	case a.CredsFile != "":
		opts = append(opts, nats.UserCredentials(a.CredsFile))
	}
	if a.tls() {
		opts = append(opts, nats.Secure())
	}
	if a.TLSCA != "" {
		opts = append(opts, nats.RootCAs(a.TLSCA))
	}
	if a.TLSCert != "" {
		opts = append(opts, nats.ClientCert(a.TLSCert, a.TLSKey))
	}
	return opts, nil
}

// Connect connects a client (replay, record, tools) to url with auth. The
// connection reconnects forever; extra options come last and win.
func Connect(url, clientName string, auth Auth, extra ...nats.Option) (*nats.Conn, error) {
	if url == "" {
		return nil, errors.New("connect: no NATS server URL")
	}
	opts, err := auth.NATSOptions()
	if err != nil {
		return nil, err
	}
	opts = append(opts, nats.Name(clientName), nats.MaxReconnects(-1), nats.ReconnectWait(DefaultReconnectWait))
	nc, err := nats.Connect(url, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", url, err)
	}
	return nc, nil
}

// CheckCredentials connects once with the credentials in opts, as Start
// will, and disconnects: to the external server, or to a throwaway copy of
// the embedded server made from its config file (WithEmbeddedConfig, on a
// free port, without JetStream). Without either there is nothing to check:
// the embedded server takes the node's own credentials. vlanode serve calls
// it before loading the model, so that wrong credentials are found at once
// rather than after the load.
func CheckCredentials(ctx context.Context, opts ...Option) error {
	o, err := buildOptions(opts)
	if err != nil {
		return err
	}
	url := o.NATSURL
	if url == "" {
		if o.ServerConfig == "" {
			return nil
		}
		sopts, err := embeddedOptions(&o)
		if err != nil {
			return fmt.Errorf("node: %w", err)
		}
		sopts.Host, sopts.Port, sopts.JetStream, sopts.StoreDir = "127.0.0.1", server.RANDOM_PORT, false, ""
		srv, err := server.NewServer(sopts)
		if err != nil {
			return fmt.Errorf("node: embedded server config %s: %w", o.ServerConfig, err)
		}
		go srv.Start()
		defer func() {
			srv.Shutdown()
			srv.WaitForShutdown()
		}()
		if !srv.ReadyForConnections(embeddedReadyTimeout) {
			return fmt.Errorf("node: checking credentials: a server from %s did not start", o.ServerConfig)
		}
		url = srv.ClientURL()
	}
	nopts, err := o.Auth.NATSOptions()
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	nc, err := nats.Connect(url, append(nopts, nats.Name("vlanode "+o.Name+" (credentials check)"))...)
	if err != nil {
		return fmt.Errorf("node: connecting to %s: %w", url, err)
	}
	defer nc.Close()
	fctx, cancel := context.WithTimeout(ctx, startFlushTimeout)
	defer cancel()
	if err := nc.FlushWithContext(fctx); err != nil {
		return fmt.Errorf("node: connecting to %s: %w", url, err)
	}
	return nil
}
