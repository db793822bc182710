package exporter

// TextScrapes is how many scrapes the text fast path has served, in this
// process.
func TextScrapes() uint64 { return textScrapes.Load() }
