package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
)

// How the commands reach real servers: addresses as host:port or redis://
// and rediss:// URLs (with user, password and database), a password from
// the environment, and TLS. No message ever prints a password.

// nodeFlags are the flags that say how to reach the nodes.
type nodeFlags struct {
	addrs                           *string
	env                             string // the variable read when --addrs is not given, if any
	tls                             bool
	caFile, certFile, keyFile, name string
}

// registerNodeFlags registers --addrs, with REDLOCK_ADDRS as its default
// (help tells what empty means), and the TLS flags on fs.
func registerNodeFlags(fs *flag.FlagSet, emptyMeans string) *nodeFlags {
	nf := registerNodeFlagsHelp(fs, "",
		"comma-separated independent Redis masters, each host:port or a redis:// or rediss:// URL "+
			"(redis://user:password@host:port/db) (default $REDLOCK_ADDRS; "+emptyMeans+"); "+
			"a password not in the URL comes from $REDLOCK_PASSWORD or $REDISCLI_AUTH")
	// Read when asked for, not shown as the flag's default: --help must
	// not print a password the variable's URLs may hold.
	nf.env = "REDLOCK_ADDRS"
	return nf
}

// registerNodeFlagsHelp registers --addrs with its default and help, and
// the TLS flags.
func registerNodeFlagsHelp(fs *flag.FlagSet, addrs, help string) *nodeFlags {
	nf := &nodeFlags{addrs: fs.String("addrs", addrs, help)}
	fs.BoolVar(&nf.tls, "tls", false, "use TLS to every node (implied by rediss:// and by the other --tls flags)")
	fs.StringVar(&nf.caFile, "tls-ca", "", "PEM file of the CA that signed the nodes' certificates (default: the system's)")
	fs.StringVar(&nf.certFile, "tls-cert", "", "PEM file of the client certificate, for nodes that require one (with --tls-key)")
	fs.StringVar(&nf.keyFile, "tls-key", "", "PEM file of the client certificate's key")
	fs.StringVar(&nf.name, "tls-server-name", "", "the name the nodes' certificates must carry (default: each node's host)")
	return nf
}

// addrList returns the addresses given.
func (nf *nodeFlags) addrList() []string {
	if *nf.addrs == "" && nf.env != "" {
		return splitAddrs(os.Getenv(nf.env))
	}
	return splitAddrs(*nf.addrs)
}

// errConfig marks a configuration error: exit status 78 (EX_CONFIG).
var errConfig = errors.New("configuration error")

// clients returns a go-redis client for each address, each call bounded
// by timeout. Its errors match errConfig and never hold a password.
func (nf *nodeFlags) clients(timeout time.Duration) ([]redis.UniversalClient, error) {
	opts, err := nf.options(timeout)
	if err != nil {
		return nil, err
	}
	clients := make([]redis.UniversalClient, len(opts))
	for i, o := range opts {
		clients[i] = redis.NewClient(o)
	}
	return clients, nil
}

// options returns the go-redis options of each address, each call bounded
// by timeout. Its errors match errConfig and never hold a password.
func (nf *nodeFlags) options(timeout time.Duration) ([]*redis.Options, error) {
	tlsConf, err := nf.tlsConfig()
	if err != nil {
		return nil, err
	}
	password := os.Getenv("REDLOCK_PASSWORD")
	if password == "" {
		password = os.Getenv("REDISCLI_AUTH")
	}
	var all []*redis.Options
	for i, a := range nf.addrList() {
		opts, err := nodeOptions(a)
		if err != nil {
			return nil, fmt.Errorf("%w: address %d (%s): %v", errConfig, i+1, redact(a), err)
		}
		if opts.Password == "" {
			opts.Password = password
		}
		if tlsConf != nil || opts.TLSConfig != nil {
			opts.TLSConfig = mergeTLS(opts.TLSConfig, tlsConf)
		}
		// The lock enforces its own per-node timeout; a late reply is read
		// by the call that sent it, so the connection is kept (see
		// docs/algorithm.md on client settings).
		opts.MaxRetries, opts.DialerRetries = -1, 1
		opts.ReadTimeout, opts.WriteTimeout = timeout, timeout
		all = append(all, opts)
	}
	return all, nil
}

// nodeOptions parses one address: a URL, or host:port. Its error never
// repeats the address.
func nodeOptions(a string) (*redis.Options, error) {
	if !strings.Contains(a, "://") {
		switch {
		case strings.Contains(a, "@"):
			return nil, errors.New("want host:port: a user and password go in a redis:// URL, or the password in $REDLOCK_PASSWORD")
		case !strings.Contains(a, ":"):
			return nil, errors.New("want host:port or a redis:// URL")
		}
		return &redis.Options{Addr: a}, nil
	}
	opts, err := redis.ParseURL(a)
	if err != nil {
		// go-redis's messages may quote parts of the URL: name the
		// problem without them.
		u, perr := url.Parse(a)
		switch {
		case perr != nil:
			return nil, errors.New("not a valid URL")
		case u.Scheme != "redis" && u.Scheme != "rediss":
			return nil, fmt.Errorf("scheme %q: want redis:// or rediss://", u.Scheme)
		default:
			return nil, errors.New("not a valid redis:// URL (redis://[user:password@]host:port[/db])")
		}
	}
	return opts, nil
}

// redact returns an address fit to print: whatever stands between the
// scheme and the last "@" (a user and password, however the password is
// written) is replaced, and so is the value of a password parameter.
func redact(a string) string {
	scheme := ""
	if i := strings.Index(a, "://"); i >= 0 {
		scheme, a = a[:i+3], a[i+3:]
	}
	if i := strings.LastIndex(a, "@"); i >= 0 {
		a = "xxxxx@" + a[i+1:]
	}
	return scheme + passwordParam.ReplaceAllString(a, "${1}xxxxx")
}

// passwordParam matches a URL's password parameter and its value.
var passwordParam = regexp.MustCompile(`(?i)([?&]password=)[^&]*`)

// tlsConfig returns the TLS configuration the flags ask for, or nil.
func (nf *nodeFlags) tlsConfig() (*tls.Config, error) {
	if !nf.tls && nf.caFile == "" && nf.certFile == "" && nf.keyFile == "" && nf.name == "" {
		return nil, nil
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: nf.name}
	if nf.caFile != "" {
		pem, err := os.ReadFile(nf.caFile)
		if err != nil {
			return nil, fmt.Errorf("%w: --tls-ca: %v", errConfig, err)
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: --tls-ca %s holds no PEM certificate", errConfig, nf.caFile)
		}
	}
	if (nf.certFile == "") != (nf.keyFile == "") {
		return nil, fmt.Errorf("%w: --tls-cert and --tls-key go together", errConfig)
	}
	if nf.certFile != "" {
		cert, err := tls.LoadX509KeyPair(nf.certFile, nf.keyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: --tls-cert/--tls-key: %v", errConfig, err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return conf, nil
}

// mergeTLS returns the flags' TLS configuration (flags) with the server
// name of a rediss:// URL's (fromURL) when the flags name none.
func mergeTLS(fromURL, flags *tls.Config) *tls.Config {
	if flags == nil {
		return fromURL
	}
	c := flags.Clone()
	if c.ServerName == "" && fromURL != nil {
		c.ServerName = fromURL.ServerName
	}
	return c
}

func closeAll(clients []redis.UniversalClient) {
	for _, c := range clients {
		_ = c.Close()
	}
}

// configError reports whether err, a node's failure, is one that waiting
// does not mend: a refused password, a replica or Cluster node given as a
// master (the library's ErrMisconfigured), or TLS that cannot work (an
// unknown CA, a wrong server name, a rejected client certificate, TLS to a
// port that does not speak it).
func configError(err error) bool {
	var (
		unknownCA  x509.UnknownAuthorityError
		hostname   x509.HostnameError
		invalid    x509.CertificateInvalidError
		verify     *tls.CertificateVerificationError
		alert      tls.AlertError
		record     tls.RecordHeaderError
		remoteTLS  = err != nil && strings.Contains(err.Error(), "remote error: tls:")
		misconfigd = errors.Is(err, redlock.ErrMisconfigured)
	)
	return misconfigd || remoteTLS || errors.As(err, &unknownCA) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &verify) || errors.As(err, &alert) || errors.As(err, &record)
}
