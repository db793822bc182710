package deploy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// apacheLicenseSHA256 is the SHA-256 of the Apache License 2.0 as the ASF
// publishes it (https://www.apache.org/licenses/LICENSE-2.0.txt, and
// Debian's /usr/share/common-licenses/Apache-2.0, MD5
// 3b83ef96387f14655fc854ddc3c6bd57): license scanners (GitHub's licensee,
// go-licenses, pkg.go.dev) recognise the file only when it is that text.
const apacheLicenseSHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"

// TestLicense: the repository is Apache-2.0, with the standard text in
// LICENSE and the copyright holder in NOTICE; the chart packages both, the
// chart and the image say so in their metadata.
func TestLicense(t *testing.T) {
	t.Parallel()
	lic, err := os.ReadFile("../LICENSE")
	if err != nil {
		t.Fatalf("no LICENSE: %v", err)
	}
	if sum := sha256.Sum256(lic); hex.EncodeToString(sum[:]) != apacheLicenseSHA256 {
		t.Errorf("LICENSE is not the Apache License 2.0's standard text (sha256 %x)", sum)
	}
	notice, err := os.ReadFile("../NOTICE")
	if err != nil || !strings.Contains(string(notice), "Copyright") || !strings.Contains(string(notice), "The gpuxray Authors") {
		t.Errorf("NOTICE = %q, %v: want the copyright of The gpuxray Authors", notice, err)
	}
	// helm package takes the chart folder only: it carries copies.
	for _, f := range []string{"LICENSE", "NOTICE"} {
		src, _ := os.ReadFile("../" + f)
		if got, err := os.ReadFile(chart + "/" + f); err != nil || !bytes.Equal(got, src) {
			t.Errorf("%s/%s is not a copy of %s (%v)", chart, f, f, err)
		}
	}
	b, err := os.ReadFile(chart + "/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil || c.Annotations["artifacthub.io/license"] != "Apache-2.0" {
		t.Errorf("Chart.yaml annotations %v (%v): want artifacthub.io/license: Apache-2.0", c.Annotations, err)
	}
	runtime := parseDockerfile(t, "../Dockerfile")[1]
	if l := runtime.has("LABEL "); !strings.Contains(l, `org.opencontainers.image.licenses="Apache-2.0"`) {
		t.Errorf("the image's labels %q lack org.opencontainers.image.licenses", l)
	}
	if c := runtime.has("COPY LICENSE"); c != "COPY LICENSE NOTICE /usr/share/doc/gpuxray/" {
		t.Errorf("the image does not carry LICENSE and NOTICE (%q)", c)
	}
}
