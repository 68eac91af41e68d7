module kubetrain.test/testenv/pause

go 1.26.0
