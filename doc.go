// Package redlock implements distributed locks over N independent Redis
// masters with the Redlock algorithm: a lock is held when a majority of the
// nodes took it, and it is valid for its TTL less the time the acquisition
// took and an allowance for clock drift.
//
// A Client acquires a lock in five steps (see docs/algorithm.md):
//
//  1. note the start time on a monotonic Clock;
//  2. run SET-if-absent with the TTL on every node at once, each under a
//     small per-node timeout;
//  3. count the nodes that took the lock and compute the validity:
//     ttl − elapsed − (ttl·driftFactor + 2ms); the lock is acquired only if a
//     quorum (N/2+1) took it and the validity is positive;
//  4. otherwise release it on every node that may have taken it, with a
//     context of its own;
//  5. retry after a random delay until the caller's context ends (Acquire),
//     or give up after one attempt (TryAcquire).
//
// The lock key is stored under the key as given, with a random token of 128
// bits or more as its value, so `redis-cli GET key` shows the holder.
//
// The algorithm is safe only under the assumptions in docs/safety.md:
// bounded clock rate error, nodes that persist every write or stay down
// longer than the largest TTL, and a holder that stops working when its
// validity ends.
package redlock
