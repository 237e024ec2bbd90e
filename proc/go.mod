module github.com/sundialmq/sundial/proc

go 1.26.0

require github.com/sundialmq/sundial/proto v0.0.0-00010101000000-000000000000

require (
	go.uber.org/multierr v1.10.0 // indirect
	go.uber.org/zap v1.28.0 // indirect
)

replace github.com/sundialmq/sundial/proto => ../proto
