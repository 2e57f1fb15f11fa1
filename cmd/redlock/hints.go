package main

import "strings"

// The library's hints speak to a program that makes its own go-redis
// clients ("its client's options"); this command makes them from its flags
// and environment, so its messages say which of those to set instead.
var cliHints = strings.NewReplacer(
	"set the node's password (and user) in its client's options",
	"set REDLOCK_PASSWORD (or give the password in the node's URL, redis://:PASSWORD@host:port; a user, redis://USER:PASSWORD@host:port)",
	"the node requires a password; set it (and the user) in the node's client options",
	"the node requires a password: set REDLOCK_PASSWORD (or give it in the node's URL, redis://:PASSWORD@host:port)",
	"the node is a Redis Cluster master; reach it with a redis.ClusterClient",
	"the node is a Redis Cluster master: give --addrs masters of independent servers, not of one cluster",
)

// explain is err's message with the library's hints put in this command's
// terms.
func explain(err error) string { return cliHints.Replace(err.Error()) }
