module github.com/quorumlock/redlock/redistest

go 1.24.0

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	go.uber.org/goleak v1.3.0
)

require github.com/yuin/gopher-lua v1.1.1 // indirect
