module github.com/sundialmq/sundial/broker

go 1.26.0

require (
	github.com/sundialmq/sundial/meta v0.0.0-00010101000000-000000000000
	github.com/sundialmq/sundial/proto v0.0.0-00010101000000-000000000000
	github.com/sundialmq/sundial/proxy v0.0.0-00010101000000-000000000000
)

replace (
	github.com/sundialmq/sundial/meta => ../meta
	github.com/sundialmq/sundial/proto => ../proto
	github.com/sundialmq/sundial/proxy => ../proxy
)
