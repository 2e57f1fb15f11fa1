package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ServerKind is the program that runs a node.
type ServerKind string

const (
	// Redis is Debian's redis-server.
	Redis ServerKind = "redis"
	// Embedded is the embedded Redis server built into the running
	// executable (see ServeEmbeddedFromEnv). It keeps no data across a
	// restart and has no replication.
	Embedded ServerKind = "embedded"
)

// DefaultServerKind returns Redis when redis-server is on PATH, else Embedded.
func DefaultServerKind() ServerKind {
	if _, err := exec.LookPath("redis-server"); err == nil {
		return Redis
	}
	return Embedded
}

// nodeSpec says how to run a node.
type nodeSpec struct {
	kind     ServerKind
	persist  bool   // redis only: appendonly yes, appendfsync always
	fsync    string // redis only: appendonly yes with this appendfsync (everysec, always); overrides persist
	clock    string // redis only: a file holding the node's clock offset (libfaketime, see faketime.go)
	replica  string // redis only: the host:port to replicate from
	cluster  bool   // redis only: cluster mode (the node owns no slot until given some)
	password string // redis only: requirepass
}

// Node is one Redis server process on a loopback port that stays the same
// across restarts.
type Node struct {
	spec    nodeSpec
	port    int
	busPort int // the cluster bus, in cluster mode
	dir     string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartNode starts a node of the given kind, without persistence, with a
// data directory of its own under dir, on a free loopback port. Stop it
// with Stop.
func StartNode(dir string, kind ServerKind) (*Node, error) {
	return startNode(dir, nodeSpec{kind: kind})
}

// Stop kills the node's process if it runs, also when it is frozen.
func (n *Node) Stop() { n.stop() }

// startNode starts a node in a data directory of its own under dir.
func startNode(dir string, spec nodeSpec) (*Node, error) {
	if spec.kind == Embedded && (spec.persist || spec.fsync != "" || spec.clock != "" || spec.replica != "" || spec.cluster || spec.password != "") {
		return nil, errors.New("chaos: the embedded server has no persistence, no replication, no cluster mode, no password and no faked clock")
	}
	var lastErr error
	for range 3 { // a port found free can be taken before the node binds it
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		n := &Node{spec: spec, port: port, dir: filepath.Join(dir, strconv.Itoa(port))}
		if spec.cluster {
			if n.busPort, err = freePort(); err != nil {
				return nil, err
			}
		}
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			return nil, err
		}
		if lastErr = n.start(); lastErr == nil {
			return n, nil
		}
	}
	return nil, lastErr
}

// freePort returns a loopback port free to listen on, below the kernel's
// ephemeral range where it can: a node's port must stay free while the
// node is down, and a port in that range can be taken by any outgoing
// connection meanwhile (a client redialling the node itself can be given
// it), so that the node could not start again.
func freePort() (int, error) {
	if lo := ephemeralLow(); lo > 2*fixedPortsFrom {
		for range 50 {
			port := fixedPortsFrom + rand.IntN(lo-fixedPortsFrom)
			if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
				ln.Close()
				return port, nil
			}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// fixedPortsFrom is the lowest port freePort picks outside the ephemeral
// range, above the ports services are commonly configured on.
const fixedPortsFrom = 10000

// ephemeralLow returns the first port of the kernel's ephemeral range, or
// 0 where it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	lo, _ := strconv.Atoi(f[0])
	return lo
}

// Addr returns the node's host:port.
func (n *Node) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)) }

// pid returns the process ID of the running node, or 0.
func (n *Node) pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

func (n *Node) command() (*exec.Cmd, error) {
	switch n.spec.kind {
	case Redis:
		args := []string{
			"--bind", "127.0.0.1", "--port", strconv.Itoa(n.port), "--dir", n.dir,
			"--save", "", "--daemonize", "no", "--protected-mode", "no",
		}
		switch {
		case n.spec.fsync != "":
			args = append(args, "--appendonly", "yes", "--appendfsync", n.spec.fsync)
		case n.spec.persist:
			args = append(args, "--appendonly", "yes", "--appendfsync", "always")
		default:
			args = append(args, "--appendonly", "no")
		}
		if n.spec.replica != "" {
			host, port, _ := net.SplitHostPort(n.spec.replica)
			args = append(args, "--replicaof", host, port)
		}
		if n.spec.cluster {
			args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
				"--cluster-port", strconv.Itoa(n.busPort))
		}
		if n.spec.password != "" {
			args = append(args, "--requirepass", n.spec.password)
		}
		cmd := exec.Command("redis-server", args...)
		if n.spec.clock != "" {
			env, err := fakeTimeEnv(n.spec.clock)
			if err != nil {
				return nil, err
			}
			cmd.Env = append(os.Environ(), env...)
		}
		return cmd, nil
	case Embedded:
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), embeddedEnv+"="+n.Addr())
		return cmd, nil
	}
	return nil, fmt.Errorf("chaos: unknown server kind %q", n.spec.kind)
}

// start starts the node's process on its port with whatever its data
// directory holds, and waits until it answers PING.
func (n *Node) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return fmt.Errorf("chaos: node %s is already running", n.Addr())
	}
	cmd, err := n.command()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(n.dir, "node.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("chaos: starting %s node: %w", n.spec.kind, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	if err := waitPing(n.Addr(), exited, 10*time.Second); err != nil {
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("chaos: %s node on %s: %w", n.spec.kind, n.Addr(), err)
	}
	n.cmd, n.exited = cmd, exited
	return nil
}

// waitPing waits until addr answers PING with PONG.
func waitPing(addr string, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("the process exited")
		default:
		}
		if ping(addr) == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("no PONG within %v", timeout)
}

func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	// A server with a password answers NOAUTH: it is up.
	if line != "+PONG\r\n" && !strings.HasPrefix(line, "-NOAUTH") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

func (n *Node) signal(sig syscall.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return fmt.Errorf("chaos: node %s is not running", n.Addr())
	}
	return n.cmd.Process.Signal(sig)
}

// kill sends SIGKILL and waits for the process to end: a crash, with no
// chance to save anything that is not already on disk.
func (n *Node) kill() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return nil
	}
	err := n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.exited
	n.cmd = nil
	if errors.Is(err, os.ErrProcessDone) {
		err = nil
	}
	return err
}

// freeze stops the process with SIGSTOP: it keeps its connections but
// answers nothing until thaw.
func (n *Node) freeze() error { return n.signal(syscall.SIGSTOP) }

// thaw resumes a frozen process with SIGCONT.
func (n *Node) thaw() error { return n.signal(syscall.SIGCONT) }

// wipe deletes the node's data files, so that the next Start begins empty.
// The node must not be running.
func (n *Node) wipe() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return fmt.Errorf("chaos: wipe of running node %s", n.Addr())
	}
	entries, err := os.ReadDir(n.dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == "node.log" {
			continue
		}
		if err := os.RemoveAll(filepath.Join(n.dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// restart kills the node and starts it again at once, with its data files
// (keepData) or without them.
func (n *Node) restart(keepData bool) error {
	if err := n.kill(); err != nil {
		return err
	}
	if !keepData {
		if err := n.wipe(); err != nil {
			return err
		}
	}
	return n.start()
}

// stop kills the process if it runs, also when it is frozen.
func (n *Node) stop() { _ = n.kill() }

// jumpScript moves every key's expiry forward by ARGV[1] milliseconds, as a
// forward step of the node's wall clock does: Redis expires keys by wall
// clock time, so a key with less time left than the jump is gone at once.
const jumpScript = `
local jump = tonumber(ARGV[1])
for _, k in ipairs(redis.call('KEYS', '*')) do
  local left = redis.call('PTTL', k)
  if left > 0 then
    if left <= jump then redis.call('DEL', k) else redis.call('PEXPIRE', k, left - jump) end
  end
end
return 0`

// jumpClock makes the node behave as if its clock jumped forward by d.
func (n *Node) jumpClock(ctx context.Context, d time.Duration) error {
	return evalOn(ctx, n.Addr(), jumpScript, d.Milliseconds())
}
