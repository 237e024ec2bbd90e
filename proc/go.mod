module github.com/sundialmq/sundial/proc

go 1.26.0
