module github.com/sundialmq/sundial/loadtest

go 1.26.0

require github.com/sundialmq/sundial/proto v0.0.0-00010101000000-000000000000

replace github.com/sundialmq/sundial/proto => ../proto
