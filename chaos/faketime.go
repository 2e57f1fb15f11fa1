package chaos

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// Real clock jumps: a node runs under libfaketime (Debian's faketime
// package), which reads the node's clock offset from a file on every
// clock call, so that writing the file moves the server's wall clock while
// it runs. Redis expires keys by that clock.
//
// Debian's redis-server allocates with jemalloc, which asks for the time
// while libfaketime initializes and makes it recurse (libfaketime's issue
// #130, unresolved upstream). The node therefore also preloads a small shim
// that sends the server's allocations to the C library's allocator, which
// libfaketime can live with; jemalloc is then never initialized. The shim
// is compiled once per run with the system C compiler.

// libfaketimePaths are where Debian's faketime package puts the library.
var libfaketimePaths = []string{
	"/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
	"/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
	"/usr/lib/faketime/libfaketime.so.1",
}

// mallocShim routes the allocation functions that redis-server imports from
// jemalloc to glibc's, and answers jemalloc's control calls as a build
// without jemalloc would (INFO then reports no allocator statistics).
const mallocShim = `#include <stddef.h>
#include <errno.h>
#include <dlfcn.h>
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);
void *malloc(size_t n) { return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { return __libc_realloc(p, n); }
void free(void *p) { __libc_free(p); }
void *memalign(size_t a, size_t n) { return __libc_memalign(a, n); }
void *aligned_alloc(size_t a, size_t n) { return __libc_memalign(a, n); }
int posix_memalign(void **r, size_t a, size_t n) {
  void *p = __libc_memalign(a, n);
  if (!p) return ENOMEM;
  *r = p;
  return 0;
}
size_t malloc_usable_size(void *p) {
  static size_t (*real)(void *);
  if (!real) real = (size_t (*)(void *))dlsym(dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD), "malloc_usable_size");
  return real(p);
}
int mallctl(const char *name, void *o, size_t *ol, void *n, size_t nl) { return ENOENT; }
size_t nallocx(size_t n, int flags) { return n; }
void malloc_stats_print(void (*w)(void *, const char *), void *c, const char *o) {}
`

var shim struct {
	once sync.Once
	path string
	err  error
}

// FakeTimeMissing tells why nodes cannot run with a faked clock here, or
// returns "" when they can: libfaketime and a C compiler are needed.
func FakeTimeMissing() string {
	if libfaketime() == "" {
		return "no libfaketime (apt-get install faketime)"
	}
	if _, err := exec.LookPath("cc"); err != nil {
		return "no C compiler for the allocator shim (apt-get install gcc)"
	}
	return ""
}

func libfaketime() string {
	for _, p := range libfaketimePaths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// fakeTimeEnv returns the environment that runs redis-server with its
// clock offset read from file.
func fakeTimeEnv(file string) ([]string, error) {
	if why := FakeTimeMissing(); why != "" {
		return nil, errors.New("chaos: faked clock: " + why)
	}
	shim.once.Do(func() {
		dir, err := os.MkdirTemp("", "redlock-faketime-")
		if err != nil {
			shim.err = err
			return
		}
		src := filepath.Join(dir, "shim.c")
		shim.path = filepath.Join(dir, "libcmalloc.so")
		if err := os.WriteFile(src, []byte(mallocShim), 0o644); err != nil {
			shim.err = err
			return
		}
		if out, err := exec.Command("cc", "-shared", "-fPIC", "-O2", "-o", shim.path, src, "-ldl").CombinedOutput(); err != nil {
			shim.err = fmt.Errorf("chaos: compiling the allocator shim: %v: %s", err, out)
		}
	})
	if shim.err != nil {
		return nil, shim.err
	}
	return []string{
		"LD_PRELOAD=" + shim.path + " " + libfaketime(),
		"FAKETIME_TIMESTAMP_FILE=" + file,
		"FAKETIME_NO_CACHE=1",            // read the file on every call: the offset moves while the server runs
		"FAKETIME_DONT_FAKE_MONOTONIC=1", // Redis times its own work by the monotonic clock
	}, nil
}

// setClockOffset writes the offset of the wall clock of the nodes that
// read file, in seconds (libfaketime's relative format).
// The file is replaced whole, so that a clock call never reads half of it.
func setClockOffset(file string, seconds float64) error {
	tmp := file + ".new"
	if err := os.WriteFile(tmp, fmt.Appendf(nil, "%+.3f\n", seconds), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}
