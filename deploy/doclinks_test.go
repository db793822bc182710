package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocLinks: every relative link in README, CONTRIBUTING and docs/
// names a file that exists and, into a Markdown file, one of its headings.
func TestDocLinks(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../README.md", "../CONTRIBUTING.md")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading := regexp.MustCompile(`(?m)^#+ (.*)$`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			u := m[1]
			if regexp.MustCompile(`^[a-z]+:`).MatchString(u) {
				continue
			}
			path, anchor, _ := strings.Cut(u, "#")
			target := f
			if path != "" {
				target = filepath.Join(filepath.Dir(f), path)
			}
			tb, err := os.ReadFile(target)
			if err != nil {
				if _, serr := os.Stat(target); serr != nil {
					t.Errorf("%s: link %s: %v", f, u, serr)
				}
				continue // a folder
			}
			if anchor == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			found := false
			for _, h := range heading.FindAllStringSubmatch(string(tb), -1) {
				if slug(h[1]) == anchor {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("%s: link %s: no such heading in %s", f, u, target)
			}
		}
	}
}

// slug is GitHub's anchor of a heading: lower case, spaces to dashes, and
// punctuation but dashes and underscores dropped.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}
