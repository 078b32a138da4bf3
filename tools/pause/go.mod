module tfd.local/tools/pause

go 1.24
