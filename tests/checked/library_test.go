package main

import (
	"testing"
	"time"
)

// A library writer that exits during the run is noticed (the run then fails), its waiting
// requests answered unknown; one closed by the driver at the end is not.
func TestALibraryWriterThatDiesIsNoticed(t *testing.T) {
	died, err := newLibrary("/bin/true", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-died.gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the exit was not seen")
	}
	if !died.diedEarly() {
		t.Fatal("a library writer that exited by itself was not noticed")
	}
	if a := died.ask(map[string]interface{}{"op": "claim"}); a.Status == Ok {
		t.Fatalf("a request to a dead library writer was answered %+v", a)
	}

	closed, err := newLibrary("/bin/cat", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	closed.close()
	<-closed.gone
	if closed.diedEarly() {
		t.Fatal("a library writer closed at the end was taken for one that died")
	}
}
