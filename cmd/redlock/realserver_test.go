package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The command as a user runs it: the built binary, real processes, real
// redis-server nodes. Without redis-server these tests are skipped, except
// in CI (CI=true), where a missing server is a failure.

// needRedisServer skips or fails the test when redis-server is missing.
func needRedisServer(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server is not installed; CI runs these tests against it")
		}
		t.Skip("needs redis-server")
	}
}

// freePort returns a loopback port nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startRedis starts a redis-server on a free loopback port with the extra
// arguments args(port) and returns its address; it is stopped by PID when
// the test ends.
func startRedis(t *testing.T, args func(port int) []string) string {
	t.Helper()
	addr, _ := startRedisProcess(t, args)
	return addr
}

// startRedisProcess is startRedis that also returns the server's process.
func startRedisProcess(t *testing.T, args func(port int) []string) (string, *os.Process) {
	t.Helper()
	needRedisServer(t)
	port := freePort(t)
	argv := append([]string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir()}, args(port)...)
	cmd := exec.Command("redis-server", argv...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	waitFor(t, 10*time.Second, "redis-server on "+addr+" to listen", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
	return addr, cmd.Process
}

// plainServer starts a redis-server with no password.
func plainServer(t *testing.T) string {
	return startRedis(t, func(port int) []string { return []string{"--port", strconv.Itoa(port)} })
}

// passwordServer starts a redis-server that requires password pw.
func passwordServer(t *testing.T, pw string) string {
	return startRedis(t, func(port int) []string {
		return []string{"--port", strconv.Itoa(port), "--requirepass", pw}
	})
}

// waitFor polls cond until it holds, failing the test after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// admin returns a client of a real server, closed when the test ends.
func admin(t *testing.T, addr, password string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, Password: password, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// redlockBinary builds the command once per test run and returns its path.
func redlockBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "redlock-bin-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "redlock")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// proc is a running redlock process.
type proc struct {
	cmd         *exec.Cmd
	out, errOut *syncBuffer
	done        chan struct{}
	exit        int
}

// startBin starts the built command with args; env holds the only
// REDLOCK_* and REDISCLI_AUTH variables it sees.
func startBin(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startBinWith(t, nil, env, args...)
}

// startBinWith is startBin with setup applied to the command before it
// starts.
func startBinWith(t *testing.T, setup func(*exec.Cmd), env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(redlockBinary(t), args...), done: make(chan struct{}), out: newSyncBuffer(), errOut: newSyncBuffer()}
	p.cmd.Env = append(cleanEnv(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.errOut
	p.cmd.WaitDelay = 10 * time.Second // a command left behind may hold the output open
	if setup != nil {
		setup(p.cmd)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := p.cmd.Wait()
		p.exit = exitStatus(err)
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait returns the process's exit status, failing the test after limit.
func (p *proc) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.exit
	case <-time.After(limit):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("redlock %v still running after %v\nstdout:\n%s\nstderr:\n%s", p.cmd.Args[1:], limit, p.out.String(), p.errOut.String())
		return 0
	}
}

// runBin runs the built command to its end.
func runBin(t *testing.T, env []string, args ...string) (exit int, stdout, stderr string) {
	t.Helper()
	p := startBin(t, env, args...)
	exit = p.wait(t, time.Minute)
	return exit, p.out.String(), p.errOut.String()
}

func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REDLOCK_") && !strings.HasPrefix(kv, "REDISCLI_AUTH=") {
			env = append(env, kv)
		}
	}
	return env
}

// syncBuffer is a buffer that a process writes while the test reads it.
type syncBuffer struct{ lockedWriter }

func newSyncBuffer() *syncBuffer { return &syncBuffer{lockedWriter{w: new(bytes.Buffer)}} }

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.(*bytes.Buffer).String()
}

// The test binary doubles as the command that redlock exec runs (see
// runTestChild): it records the signals it gets, or holds until told.
const (
	childModeEnv = "REDLOCK_TEST_CHILD"
	childFileEnv = "REDLOCK_TEST_FILE"
	// How long a signals child lives on after a signal (default 1s).
	childLingerEnv = "REDLOCK_TEST_LINGER"
)

// child is a command for redlock exec: this test binary in a mode. Its
// ready file appears once it runs with its signal handlers installed.
type child struct {
	file string
	argv []string
}

func newChild(t *testing.T, mode string) child {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), mode)
	return child{file: file, argv: []string{"env", childModeEnv + "=" + mode, childFileEnv + "=" + file, self}}
}

func (c child) waitReady(t *testing.T) {
	t.Helper()
	waitFor(t, 30*time.Second, "the command to start", func() bool {
		_, err := os.Stat(c.file + ".ready")
		return err == nil
	})
}

// pid is the running command's process ID.
func (c child) pid(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(c.file + ".ready")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// release tells a holding child to exit 0.
func (c child) release(t *testing.T) {
	if err := os.WriteFile(c.file+".go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// signals returns the signals a recording child got, in order.
func (c child) signals(t *testing.T) []string {
	b, err := os.ReadFile(c.file)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// runTestChild runs this binary as a child command when the environment
// asks for one, and never returns then:
//   - signals: records each SIGINT, SIGTERM, SIGHUP and SIGQUIT it gets,
//     one name per line, and exits 0 REDLOCK_TEST_LINGER (default one
//     second) after the last, or after a minute without any;
//   - hold: exits 0 once the file's ".go" companion exists.
func runTestChild() {
	mode, file := os.Getenv(childModeEnv), os.Getenv(childFileEnv)
	if mode == "" {
		return
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	// Written whole, then renamed: a test that sees the file reads the pid.
	if err := os.WriteFile(file+".ready-tmp", []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.Exit(3)
	}
	if err := os.Rename(file+".ready-tmp", file+".ready"); err != nil {
		os.Exit(3)
	}
	switch mode {
	case "signals":
		linger, err := time.ParseDuration(os.Getenv(childLingerEnv))
		if err != nil {
			linger = time.Second
		}
		quiet := time.NewTimer(time.Minute)
		for {
			select {
			case s := <-sigs:
				f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
				if err != nil {
					os.Exit(3)
				}
				fmt.Fprintln(f, unixSignalName(s))
				_ = f.Close()
				quiet.Reset(linger)
			case <-quiet.C:
				os.Exit(0)
			}
		}
	case "hold":
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(file + ".go"); err == nil {
				os.Exit(0)
			}
		}
		os.Exit(4)
	}
	os.Exit(5)
}

func unixSignalName(s os.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "INT"
	case syscall.SIGTERM:
		return "TERM"
	case syscall.SIGHUP:
		return "HUP"
	case syscall.SIGQUIT:
		return "QUIT"
	}
	return s.String()
}

// certs are a CA and the server and client certificates it signed, as
// PEM files.
type certs struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

// writeCerts generates a CA, a server certificate for 127.0.0.1 and
// localhost, and a client certificate, into dir.
func writeCerts(t *testing.T, dir string) certs {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redlock test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	c := certs{ca: filepath.Join(dir, "ca.pem")}
	writePEM(t, c.ca, "CERTIFICATE", caDER)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (certFile, keyFile string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
		writePEM(t, certFile, "CERTIFICATE", der)
		writePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
		return certFile, keyFile
	}
	c.serverCert, c.serverKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	c.clientCert, c.clientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return c
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// tlsServer starts a redis-server that speaks TLS only and requires a
// client certificate signed by c's CA.
func tlsServer(t *testing.T, c certs) string {
	return startRedis(t, func(port int) []string {
		return []string{"--port", "0", "--tls-port", strconv.Itoa(port),
			"--tls-cert-file", c.serverCert, "--tls-key-file", c.serverKey, "--tls-ca-cert-file", c.ca,
			"--tls-auth-clients", "yes"}
	})
}

// holdWith starts redlock exec holding key on addrs (through args) with a
// holding child, and returns once the child runs.
func holdWith(t *testing.T, env []string, key string, args ...string) (*proc, child) {
	t.Helper()
	c := newChild(t, "hold")
	argv := append([]string{"exec", "--key", key, "--ttl", "10s"}, args...)
	p := startBin(t, env, append(append(argv, "--"), c.argv...)...)
	c.waitReady(t)
	return p, c
}

// TestBinary_passwordThroughURLAndEnvironment: exec, status and unlock
// reach redis-server nodes with requirepass through redis:// URLs and
// through REDLOCK_PASSWORD (kept out of the process list); status shows the
// holder's host, pid and command; the password is never printed.
func TestBinary_passwordThroughURLAndEnvironment(t *testing.T) {
	const pw = "s3cret-pw"
	var plain, urls []string
	for range 3 {
		a := passwordServer(t, pw)
		plain = append(plain, a)
		urls = append(urls, "redis://:"+pw+"@"+a+"/0")
	}
	envPW := []string{"REDLOCK_PASSWORD=" + pw}

	// Held through URLs; seen and refused through the environment.
	holder, c := holdWith(t, nil, "nightly", "--addrs", strings.Join(urls, ","))
	exit, out, errOut := runBin(t, envPW, "status", "--addrs", strings.Join(plain, ","), "nightly")
	want := fmt.Sprintf("pid=%s cmd=env %s=hold", c.pid(t), childModeEnv)
	if c.pid(t) == fmt.Sprint(holder.cmd.Process.Pid) {
		t.Fatal("the command's pid is redlock's")
	}
	if exit != 0 || !strings.Contains(out, "held by ") || !strings.Contains(out, want) {
		t.Fatalf("status: exit %d, want 0 and %q\n%s%s", exit, want, out, errOut)
	}
	exit, _, errOut = runBin(t, envPW, "exec", "--addrs", strings.Join(plain, ","), "--key", "nightly", "--ttl", "5s", "--", "true")
	if exit != exitNotAcquired {
		t.Fatalf("a second exec while held: exit %d, want %d (%s)", exit, exitNotAcquired, errOut)
	}
	// Through REDISCLI_AUTH too, as redis-cli takes it.
	if exit, out, errOut := runBin(t, []string{"REDISCLI_AUTH=" + pw}, "status", "--addrs", strings.Join(plain, ","), "nightly"); exit != 0 || !strings.Contains(out, "held by") {
		t.Fatalf("status through REDISCLI_AUTH: exit %d\n%s%s", exit, out, errOut)
	}
	c.release(t)
	if exit := holder.wait(t, time.Minute); exit != 0 {
		t.Fatalf("exec: exit %d\n%s", exit, holder.errOut.String())
	}

	// Through the environment, the password is not on the command line.
	holder, c = holdWith(t, envPW, "nightly", "--addrs", strings.Join(plain, ","))
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", holder.cmd.Process.Pid))
	if err == nil && bytes.Contains(cmdline, []byte(pw)) {
		t.Fatalf("the password is in the process list: %q", cmdline)
	}
	// A holder that cannot release (killed): status gives its token and
	// unlock, with the flags after KEY, releases it.
	_ = holder.cmd.Process.Kill()
	c.release(t) // the command, left alone, holds redlock's output open
	holder.wait(t, time.Minute)
	_, out, _ = runBin(t, envPW, "status", "--addrs", strings.Join(plain, ","), "nightly")
	token := tokenIn(out)
	if token == "" {
		t.Fatalf("status shows no token of the killed holder:\n%s", out)
	}
	if exit, _, errOut := runBin(t, envPW, "unlock", "nightly", "--addrs", strings.Join(plain, ",")); exit != 2 || !strings.Contains(errOut, "--token is required") {
		t.Fatalf("unlock without a token: exit %d (%s), want 2", exit, errOut)
	}
	if exit, out, errOut := runBin(t, envPW, "unlock", "nightly", "--token", token, "--addrs", strings.Join(plain, ",")); exit != 0 {
		t.Fatalf("unlock: exit %d\n%s%s", exit, out, errOut)
	}
	if exit, out, _ := runBin(t, envPW, "status", "--addrs", strings.Join(plain, ","), "nightly"); exit != 0 || !strings.Contains(out, "not held") {
		t.Fatalf("status after unlock: exit %d\n%s", exit, out)
	}

	// Without the password, or with a wrong one: a configuration error.
	if exit, out, errOut := runBin(t, nil, "exec", "--addrs", strings.Join(plain, ","), "--key", "k", "--ttl", "5s", "--", "true"); exit != exitConfig {
		t.Fatalf("without the password: exit %d, want %d\n%s%s", exit, exitConfig, out, errOut)
	}
	wrong := strings.ReplaceAll(strings.Join(urls, ","), pw, "wr0ng-pass")
	exit, out, errOut = runBin(t, nil, "exec", "--addrs", wrong, "--key", "k", "--ttl", "5s", "--", "true")
	if exit != exitConfig || strings.Contains(out+errOut, "wr0ng-pass") {
		t.Fatalf("a wrong password: exit %d, want %d, and no password printed\n%s%s", exit, exitConfig, out, errOut)
	}
	exit, out, errOut = runBin(t, nil, "status", "--addrs", wrong, "nightly")
	if exit != exitConfig || strings.Contains(out+errOut, "wr0ng-pass") {
		t.Fatalf("status with a wrong password: exit %d, want %d, and no password printed\n%s%s", exit, exitConfig, out, errOut)
	}
}

// tokenIn returns the token of the holder line of status's output.
func tokenIn(status string) string {
	for _, line := range strings.Split(status, "\n") {
		if rest, ok := strings.CutPrefix(line, "held by "); ok {
			return strings.Fields(rest)[0]
		}
	}
	return ""
}

// TestBinary_TLS: exec and status reach redis-server nodes that speak TLS
// only and require a client certificate, through rediss:// URLs with
// --tls-ca, --tls-cert and --tls-key; an unknown CA, a missing client
// certificate or a wrong server name is a configuration error (78).
func TestBinary_TLS(t *testing.T) {
	c := writeCerts(t, t.TempDir())
	var urls, plain []string
	for range 3 {
		a := tlsServer(t, c)
		plain = append(plain, a)
		urls = append(urls, "rediss://"+a)
	}
	tlsFlags := []string{"--tls-ca", c.ca, "--tls-cert", c.clientCert, "--tls-key", c.clientKey}

	args := append([]string{"exec", "--addrs", strings.Join(urls, ","), "--key", "k", "--ttl", "5s"}, tlsFlags...)
	if exit, out, errOut := runBin(t, nil, append(args, "--", "echo", "ran")...); exit != 0 || !strings.Contains(out, "ran") {
		t.Fatalf("exec over TLS: exit %d\n%s%s", exit, out, errOut)
	}
	// host:port with --tls works the same.
	holder, ch := holdWith(t, nil, "k", append([]string{"--addrs", strings.Join(plain, ",")}, tlsFlags...)...)
	status := append(append([]string{"status", "--addrs", strings.Join(urls, ",")}, tlsFlags...), "k")
	if exit, out, errOut := runBin(t, nil, status...); exit != 0 || !strings.Contains(out, "held by") {
		t.Fatalf("status over TLS: exit %d\n%s%s", exit, out, errOut)
	}
	ch.release(t)
	if exit := holder.wait(t, time.Minute); exit != 0 {
		t.Fatalf("exec over TLS with --tls: exit %d\n%s", exit, holder.errOut.String())
	}

	for _, tt := range []struct {
		name  string
		flags []string
	}{
		{"the system's CAs", []string{"--tls-cert", c.clientCert, "--tls-key", c.clientKey}},
		{"no client certificate", []string{"--tls-ca", c.ca}},
		{"a wrong server name", append([]string{"--tls-server-name", "elsewhere.example"}, tlsFlags...)},
	} {
		args := append([]string{"exec", "--addrs", strings.Join(urls, ","), "--key", "k", "--ttl", "5s"}, tt.flags...)
		if exit, out, errOut := runBin(t, nil, append(args, "--", "true")...); exit != exitConfig {
			t.Errorf("%s: exit %d, want %d\n%s%s", tt.name, exit, exitConfig, out, errOut)
		}
	}
}

// TestBinary_exitCodes: each exit status of redlock exec, from real
// processes on real nodes.
func TestBinary_exitCodes(t *testing.T) {
	var addrs []string
	for range 3 {
		addrs = append(addrs, plainServer(t))
	}
	nodes := strings.Join(addrs, ",")
	execArgs := func(extra ...string) []string {
		return append([]string{"exec", "--addrs", nodes, "--key", "job", "--ttl", "5s"}, extra...)
	}
	notExecutable := filepath.Join(t.TempDir(), "script.sh")
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
		exit int
	}{
		{"the command's own status", execArgs("--", "sh", "-c", "exit 3"), 3},
		{"a command ended by a signal", execArgs("--", "sh", "-c", "kill -KILL $$"), 128 + 9},
		{"command not found", execArgs("--", "no-such-command-here"), exitNotFound},
		{"command not executable", execArgs("--", notExecutable), exitNotExecutable},
		{"nodes unreachable", []string{"exec", "--addrs", fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", freePort(t), freePort(t), freePort(t)),
			"--key", "job", "--ttl", "5s", "--", "true"}, exitUnavailable},
		{"a bad address", []string{"exec", "--addrs", "redis://127.0.0.1:notaport", "--key", "job", "--ttl", "5s", "--", "true"}, exitConfig},
		{"a bad flag", []string{"exec", "--nope"}, 2},
	} {
		if exit, out, errOut := runBin(t, nil, tt.args...); exit != tt.exit {
			t.Errorf("%s: exit %d, want %d\n%s%s", tt.name, exit, tt.exit, out, errOut)
		}
	}

	// Another holder: 75 at once, and 130 or 143 when a signal ends --wait.
	holder, c := holdWith(t, nil, "job", "--addrs", nodes)
	if exit, _, errOut := runBin(t, nil, execArgs("--", "true")...); exit != exitNotAcquired {
		t.Errorf("another holder: exit %d, want %d (%s)", exit, exitNotAcquired, errOut)
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		waiter := startBin(t, nil, execArgs("--wait", "1m", "--", "true")...)
		waitFor(t, 30*time.Second, "the waiter to subscribe to the lock's release", func() bool { return subscribed(t, addrs) })
		_ = waiter.cmd.Process.Signal(sig)
		if exit := waiter.wait(t, 30*time.Second); exit != 128+int(sig) {
			t.Errorf("%v while waiting: exit %d, want %d\n%s", sig, exit, 128+int(sig), waiter.errOut.String())
		}
		waitFor(t, 10*time.Second, "the waiter's subscription to end", func() bool { return !subscribed(t, addrs) })
	}
	c.release(t)
	holder.wait(t, time.Minute)

	// The lock lost while the command runs: the command is stopped, 76.
	holder, _ = holdWith(t, nil, "job", "--addrs", nodes, "--grace", "2s")
	for _, a := range addrs {
		admin(t, a, "").Del(context.Background(), "job")
	}
	if exit := holder.wait(t, time.Minute); exit != exitLockLost {
		t.Errorf("lock lost: exit %d, want %d\n%s", exit, exitLockLost, holder.errOut.String())
	}
}

// TestBinary_signalsReachTheCommandOnce: SIGTERM, SIGINT and SIGHUP sent
// to redlock reach the command once; the lock stays held (renewed) until
// the command exits.
func TestBinary_signalsReachTheCommandOnce(t *testing.T) {
	var addrs []string
	for range 3 {
		addrs = append(addrs, plainServer(t))
	}
	nodes := strings.Join(addrs, ",")
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		c := newChild(t, "signals")
		argv := c.argv
		if sig == syscall.SIGTERM {
			// The command lives on for 3 TTLs after the signal: the lock
			// must be renewed all along.
			argv = append([]string{argv[0], childLingerEnv + "=6s"}, argv[1:]...)
		}
		p := startBin(t, nil, append([]string{"exec", "--addrs", nodes, "--key", "sig", "--ttl", "2s", "--"}, argv...)...)
		c.waitReady(t)
		_ = p.cmd.Process.Signal(sig)
		if sig == syscall.SIGTERM {
			time.Sleep(4 * time.Second) // twice the TTL
			if exit, out, errOut := runBin(t, nil, "status", "--addrs", nodes, "sig"); exit != 0 || !strings.Contains(out, "held by") {
				t.Fatalf("two TTLs after SIGTERM, with the command still running: exit %d, want the lock held\n%s%s", exit, out, errOut)
			}
		}
		if exit := p.wait(t, time.Minute); exit != 0 {
			t.Fatalf("%v: exit %d\n%s", sig, exit, p.errOut.String())
		}
		if got, want := strings.Join(c.signals(t), " "), unixSignalName(sig); got != want {
			t.Errorf("%v sent to redlock: the command got %q, want %q once", sig, got, want)
		}
	}
}

// TestBinary_demoLeavesREDLOCK_ADDRSUntouched: the demo run with
// REDLOCK_ADDRS naming a live server opens no connection to it: no key
// written, never paused.
func TestBinary_demoLeavesREDLOCK_ADDRSUntouched(t *testing.T) {
	live := plainServer(t)
	watch := admin(t, live, "")
	ctx := context.Background()
	before, err := watch.Info(ctx, "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	exit, out, errOut := runBin(t, []string{"REDLOCK_ADDRS=" + live + "," + live + "," + live},
		"demo", "--stock", "30", "--buyers", "4", "--fail-after", "10")
	if exit != 0 || !strings.Contains(out, "embedded nodes") {
		t.Fatalf("demo: exit %d\n%s%s", exit, out, errOut)
	}
	after, err := watch.Info(ctx, "stats", "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if a, b := infoField(after, "total_connections_received"), infoField(before, "total_connections_received"); a != b {
		t.Errorf("the demo connected to the server named by REDLOCK_ADDRS: connections %s, then %s", b, a)
	}
	if strings.Contains(after, "cmdstat_client|pause") {
		t.Error("the server named by REDLOCK_ADDRS was paused")
	}
	if n, _ := watch.DBSize(ctx).Result(); n != 0 {
		t.Errorf("the demo left %d keys there", n)
	}
}

// subscribed reports whether a client listens on any channel of any of the
// nodes: a waiting Acquire listens for its lock's release.
func subscribed(t *testing.T, addrs []string) bool {
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
		chans, _ := c.PubSubChannels(context.Background(), "*").Result()
		_ = c.Close()
		if len(chans) > 0 {
			return true
		}
	}
	return false
}

// pauseCalls is the number of CLIENT PAUSE calls in INFO commandstats.
func pauseCalls(info string) int {
	stats, _, _ := strings.Cut(infoField(info, "cmdstat_client|pause"), ",")
	n, _ := strconv.Atoi(strings.TrimPrefix(stats, "calls="))
	return n
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// TestBinary_demoUnpausesRealServers: on servers named with --addrs, the
// demo says what it will do, pauses a minority for lock writes, and
// unpauses them when the sale ends, whether it ends normally or by an
// interrupt: a write on a paused node answers at once afterwards, though
// --fail-for is a minute.
func TestBinary_demoUnpausesRealServers(t *testing.T) {
	var addrs []string
	for range 3 {
		addrs = append(addrs, plainServer(t))
	}
	paused := admin(t, addrs[2], "")
	ctx := context.Background()
	writeAnswersAtOnce := func(when string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if err := paused.Set(ctx, "after-the-demo", "x", 0).Err(); err != nil {
			t.Fatalf("%s: a write on the failed node: %v (still paused)", when, err)
		}
		paused.Del(context.Background(), "after-the-demo")
	}

	exit, out, errOut := runBin(t, nil, "demo", "--addrs", strings.Join(addrs, ","), "--stock", "30", "--buyers", "4",
		"--fail-after", "10", "--fail-for", "1m")
	if exit != 0 || !strings.Contains(out, "quorum lock on 3 redis-server nodes") || !strings.Contains(out, "nodes [2] failed") {
		t.Fatalf("demo: exit %d\n%s%s", exit, out, errOut)
	}
	for _, want := range []string{"running on 3 real servers", "CLIENT PAUSE WRITE", addrs[2], "CLIENT UNPAUSE"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("the demo did not announce %q:\n%s", want, errOut)
		}
	}
	writeAnswersAtOnce("after the sale")

	// Interrupted once the node is paused: by Ctrl-C, or by the hang-up
	// of a closed terminal.
	for i, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP} {
		p := startBin(t, nil, "demo", "--addrs", strings.Join(addrs, ","), "--stock", "1000000", "--buyers", "4",
			"--fail-after", "0", "--fail-for", "1m")
		waitFor(t, 30*time.Second, "the demo to pause the node", func() bool {
			info, _ := paused.Info(ctx, "commandstats").Result()
			return pauseCalls(info) == 2+i // the runs before, and this one
		})
		_ = p.cmd.Process.Signal(sig)
		if exit := p.wait(t, time.Minute); exit != 128+int(sig) {
			t.Errorf("demo interrupted by %v: exit %d, want %d\n%s", sig, exit, 128+int(sig), p.errOut.String())
		}
		writeAnswersAtOnce("after " + sig.String())
	}
}

// TestBinary_signalWhileTakingTheLock: a SIGTERM that comes while the lock
// is being taken (here: the first contact waits for a frozen node) ends
// exec with 143 without running the command, and leaves no key behind.
func TestBinary_signalWhileTakingTheLock(t *testing.T) {
	var (
		addrs  []string
		frozen *os.Process
	)
	for range 3 {
		a, p := startRedisProcess(t, func(port int) []string { return []string{"--port", strconv.Itoa(port)} })
		addrs, frozen = append(addrs, a), p
	}
	if err := frozen.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = frozen.Signal(syscall.SIGCONT) })
	marker := filepath.Join(t.TempDir(), "ran")
	p := startBin(t, nil, "exec", "--addrs", strings.Join(addrs, ","), "--key", "taking", "--ttl", "10s", "--", "touch", marker)
	live := []*redis.Client{admin(t, addrs[0], ""), admin(t, addrs[1], "")}
	waitFor(t, 30*time.Second, "the lock's key on the live nodes", func() bool {
		n, _ := live[0].Exists(context.Background(), "taking").Result()
		m, _ := live[1].Exists(context.Background(), "taking").Result()
		return n+m == 2
	})
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if exit := p.wait(t, time.Minute); exit != 143 {
		t.Fatalf("SIGTERM while taking the lock: exit %d, want 143\n%s", exit, p.errOut.String())
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran after SIGTERM")
	}
	for i, c := range live {
		if n, _ := c.Exists(context.Background(), "taking").Result(); n != 0 {
			t.Errorf("node %d keeps the key after exec exited", i)
		}
	}
}

// TestBinary_failedAcquireLeavesNothing: an exec whose --wait ends before
// its attempt is answered leaves no key on any node once it has exited (the
// attempt's deletes are waited for), and with no other holder its status
// is 69, not 75.
func TestBinary_failedAcquireLeavesNothing(t *testing.T) {
	var addrs []string
	for range 3 {
		addrs = append(addrs, plainServer(t))
	}
	for i := range 10 {
		key := fmt.Sprintf("short-wait-%d", i)
		exit, _, errOut := runBin(t, nil, "exec", "--addrs", strings.Join(addrs, ","), "--key", key, "--ttl", "30s", "--wait", "1ms", "--", "true")
		if exit != 0 && exit != exitUnavailable {
			t.Fatalf("run %d: exit %d, want 0 (acquired in time) or %d (no holder, no answer in time): %s", i, exit, exitUnavailable, errOut)
		}
		for j, a := range addrs {
			if n, _ := admin(t, a, "").Exists(context.Background(), key).Result(); n != 0 {
				t.Fatalf("run %d (exit %d): node %d keeps %q after exec exited", i, exit, j, key)
			}
		}
	}
}

// TestBinary_electTakesOverAfterKill: two hosts run the same redlock elect
// line on redis-server nodes; one runs the command. Killed (SIGKILL), its
// command dies with it, its leadership is neither renewed nor released,
// and the other runs the command once the ttl has run out.
func TestBinary_electTakesOverAfterKill(t *testing.T) {
	needRedisServer(t)
	addrs := strings.Join([]string{plainServer(t), plainServer(t), plainServer(t)}, ",")
	const ttl = 2 * time.Second
	var procs []*proc
	var children []child
	for range 2 {
		c := newChild(t, "hold")
		children = append(children, c)
		procs = append(procs, startBin(t, nil, append([]string{"elect", "jobs", "--addrs", addrs, "--ttl", ttl.String(), "--"}, c.argv...)...))
	}
	leader := -1
	waitFor(t, 30*time.Second, "a leader's command", func() bool {
		for i, c := range children {
			if _, err := os.Stat(c.file + ".ready"); err == nil {
				leader = i
				return true
			}
		}
		return false
	})
	other := 1 - leader
	if _, err := os.Stat(children[other].file + ".ready"); err == nil {
		t.Fatal("both candidates run the command")
	}
	killed := time.Now()
	orphan, _ := strconv.Atoi(children[leader].pid(t))
	_ = procs[leader].cmd.Process.Kill()
	// The kernel kills the command with redlock: it must not run on
	// beside the next leader's.
	waitFor(t, 10*time.Second, "the killed leader's command to die", func() bool { return syscall.Kill(orphan, 0) != nil })
	if _, err := os.Stat(children[other].file + ".ready"); err == nil {
		t.Fatal("the next leader's command started before the killed leader's died")
	}
	children[other].waitReady(t)
	if d := time.Since(killed); d > ttl+3*time.Second {
		t.Errorf("taken over %v after the kill, ttl %v", d, ttl)
	}
	children[other].release(t)
	_ = procs[other].cmd.Process.Signal(syscall.SIGTERM)
	procs[other].wait(t, 30*time.Second)
}

// TestBinary_execCommandDiesWithRedlock: redlock exec killed with SIGKILL
// takes its command with it, so that the next holder's never runs beside
// it.
func TestBinary_execCommandDiesWithRedlock(t *testing.T) {
	needRedisServer(t)
	addrs := strings.Join([]string{plainServer(t), plainServer(t), plainServer(t)}, ",")
	p, c := holdWith(t, nil, "cron", "--addrs", addrs)
	pid, _ := strconv.Atoi(c.pid(t))
	_ = p.cmd.Process.Kill()
	waitFor(t, 10*time.Second, "the command to die with redlock", func() bool { return syscall.Kill(pid, 0) != nil })
}

// treeNodes starts three redis-server nodes.
func treeNodes(t *testing.T) (addrs []string, list string) {
	t.Helper()
	for range 3 {
		addrs = append(addrs, plainServer(t))
	}
	return addrs, strings.Join(addrs, ",")
}
