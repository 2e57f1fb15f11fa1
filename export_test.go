package redlock

// WaitSettled waits until the writes of the lock's last operation (acquire,
// extend or release) that were still under way when it returned have landed
// or timed out, so that tests can look at every node.
func WaitSettled(l *Lock) {
	l.op.Lock()
	settled := l.settled
	l.op.Unlock()
	for i := range settled.done {
		settled.waitNode(i)
	}
}

// QueuedKeys returns how many keys have goroutines holding or waiting for
// their local turn in c.
func QueuedKeys(c *Client) int {
	c.queues.mu.Lock()
	defer c.queues.mu.Unlock()
	return len(c.queues.byKey)
}
