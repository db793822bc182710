package procstat

import "testing"

func TestAfterComm(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in, want string
		ok       bool
	}{
		{"42 (python3) S 1 42", " S 1 42", true},
		{"42 (a) b (c)) R 7", " R 7", true}, // comm holds parentheses and spaces
		{"42 () Z 1", " Z 1", true},
		{"42 python3 S 1", "", false},
		{"", "", false},
	} {
		got, err := AfterComm([]byte(tt.in))
		if (err == nil) != tt.ok || string(got) != tt.want {
			t.Errorf("AfterComm(%q) = %q, %v; want %q, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}
