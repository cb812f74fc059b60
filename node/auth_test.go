package node

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func tcpPort(s *server.Server) int { return s.Addr().(*net.TCPAddr).Port }

// tryStart starts a node on url and reports Start's error.
func tryStart(t *testing.T, url string, opts ...Option) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	n, err := Start(ctx, &testEngine{}, append([]Option{WithName("auth"), WithNATSURL(url)}, opts...)...)
	if err == nil {
		require.NoError(t, n.Shutdown(ctx))
	}
	return err
}

func TestAuthUserPasswordAndToken(t *testing.T) {
	srv := runServer(t, func(o *server.Options) { o.Username, o.Password = "robot", "pw" })
	require.NoError(t, tryStart(t, srv.ClientURL(), WithUserInfo("robot", "pw")))
	assert.ErrorContains(t, tryStart(t, srv.ClientURL(), WithUserInfo("robot", "wrong")), "Authorization Violation")

	tok := runServer(t, func(o *server.Options) { o.Authorization = "tok" })
	require.NoError(t, tryStart(t, tok.ClientURL(), WithToken("tok")))
	assert.ErrorContains(t, tryStart(t, tok.ClientURL()), "Authorization Violation")
}

func TestAuthNkey(t *testing.T) {
	user, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := user.PublicKey()
	require.NoError(t, err)
	seed, err := user.Seed()
	require.NoError(t, err)
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	require.NoError(t, os.WriteFile(seedFile, seed, 0o600))

	srv := runServer(t, func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: pub}} })
	require.NoError(t, tryStart(t, srv.ClientURL(), WithNkeySeed(seedFile)))
	assert.ErrorContains(t, tryStart(t, srv.ClientURL(), WithNkeySeed(filepath.Join(t.TempDir(), "missing.nk"))), "nkey seed")
}

func TestAuthTLS(t *testing.T) {
	pki := newTestPKI(t)
	srv := runServer(t, func(o *server.Options) {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: pki.serverCert, KeyFile: pki.serverKey, CaFile: pki.ca, Verify: true})
		require.NoError(t, err)
		o.TLSConfig, o.TLS, o.TLSVerify = tc, true, true
	})
	url := "tls://127.0.0.1:" + itoa(tcpPort(srv))
	require.NoError(t, tryStart(t, url, WithTLS(pki.ca, pki.clientCert, pki.clientKey)))
	assert.Error(t, tryStart(t, url, WithTLS(pki.ca, "", "")), "the server requires a client certificate")
	assert.Error(t, tryStart(t, url, WithTLS("", pki.clientCert, pki.clientKey)), "the system roots do not trust the test CA")
}

func TestAuthChecks(t *testing.T) {
	cases := []struct {
		name string
		opts []Option
		err  string
	}{
		{"two methods", []Option{WithNATSURL("nats://x"), WithToken("t"), WithCredentials("c.creds")}, "give one of"},
		{"password alone", []Option{WithNATSURL("nats://x"), WithUserInfo("", "pw")}, "a password needs a user"},
		{"cert without key", []Option{WithNATSURL("nats://x"), WithTLS("", "c.pem", "")}, "needs its key"},
		{"nkey embedded", []Option{WithNkeySeed("u.nk")}, "need an external server"},
		{"tls embedded", []Option{WithTLS("ca.pem", "", "")}, "TLS needs an external server"},
		{"no name", nil, "a name is required"},
		{"bad name", []Option{WithName("a.b")}, "not a single NATS subject token"},
		{"queue bound", []Option{WithQueueBound(0)}, "queue bound 0"},
		{"max payload", []Option{WithMaxPayload(1 << 40)}, "max payload"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts := c.opts
			if c.name != "no name" && c.name != "bad name" {
				opts = append([]Option{WithName("n")}, opts...)
			}
			_, err := Start(context.Background(), &testEngine{}, opts...)
			assert.ErrorContains(t, err, c.err)
		})
	}
	_, err := Connect("nats://127.0.0.1:1", "x", Auth{CredsFile: filepath.Join(t.TempDir(), "none.creds")})
	assert.Error(t, err)
}

// testPKI is a CA with a server certificate for 127.0.0.1 and a client
// certificate, as PEM files.
type testPKI struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
		return p
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "vlanode test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	leaf := func(serial int64, usage x509.ExtKeyUsage, ips []net.IP) (string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "leaf"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		require.NoError(t, err)
		kder, err := x509.MarshalECPrivateKey(key)
		require.NoError(t, err)
		name := itoa(int(serial))
		return write("cert"+name+".pem", "CERTIFICATE", der), write("key"+name+".pem", "EC PRIVATE KEY", kder)
	}
	p := testPKI{ca: write("ca.pem", "CERTIFICATE", caDER)}
	p.serverCert, p.serverKey = leaf(2, x509.ExtKeyUsageServerAuth, []net.IP{net.ParseIP("127.0.0.1")})
	p.clientCert, p.clientKey = leaf(3, x509.ExtKeyUsageClientAuth, nil)
	return p
}

func itoa(i int) string { return strconv.Itoa(i) }
