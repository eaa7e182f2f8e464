package reduce

// platformPaths returns the amd64 assembly paths, worst first.
func platformPaths() []*path { return nil }
