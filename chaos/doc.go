// Package chaos is the fault-injection harness of redlock: it runs Redis
// nodes as separate processes (redis-server, or an embedded server built
// from this module when redis-server is missing), puts a proxy between the
// lock clients and each node, injects faults in the middle of a workload of
// contending lock clients, and checks the recorded history for every
// violation of mutual exclusion.
//
// The faults are real: kill -9, SIGSTOP and SIGCONT, restarts that keep or
// lose the data, network latency, blackholes and resets through
// github.com/Shopify/toxiproxy/v2 used as a library, a client that pauses
// past its lock's validity, and a forward jump of a node's clock.
//
// Run runs the scenarios (see Scenarios) and returns one Result each. The
// suite's test (go test ./chaos) and `redlock chaos` both call it.
package chaos
