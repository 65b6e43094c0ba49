package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

const (
	session = "0190a000-0000-7000-8000-000000000000"
	start   = "0190a000-0000-7000-8000-000000000001"
	first   = "0190a000-0000-7000-8000-000000000002"
	second  = "0190a000-0000-7000-8000-000000000003"
	zombie  = "0190a000-0000-7000-8000-000000000004"
	claimID = "0190a000-0000-7000-8000-000000000005"
)

func op(client int, call, ret int64, in Input, out Output) porcupine.Operation {
	in.Session, in.Client = session, client
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
}

func appendOp(client int, call, ret int64, epoch, seq uint64, id string, out Output) porcupine.Operation {
	return op(client, call, ret, Input{Kind: OpAppend, Epoch: epoch, Seq: seq, EventID: id}, out)
}

func check(t *testing.T, history []porcupine.Operation) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	t.Helper()
	return porcupine.CheckOperationsVerbose(SessionModel(Started(1, start, 1)), history, 10*time.Second)
}

// A takeover as it should go: the old writer's append races the claim and is fenced, the
// new writer appends, an unknown append of the old writer never shows, the projection lags,
// and a log read after the acknowledgement holds it.
func TestATakeoverThatKeepsTheRulesIsLinearizable(t *testing.T) {
	afterClaim := NextChain(NextChain(Started(1, start, 1).Chain, 2, first), 3, claimID)
	afterSecond := NextChain(afterClaim, 3, second)
	history := []porcupine.Operation{
		appendOp(0, 0, 10, 1, 2, first, Output{Status: Ok}),
		op(1, 5, 30, Input{Kind: OpProjRead}, Output{Status: Ok, Events: Entry(1, start, 1), Count: 1}),
		op(2, 11, 20, Input{Kind: OpClaim}, Output{Status: Ok, Epoch: 2, NextSeq: 3, ClaimSeq: 3, ClaimID: claimID}),
		appendOp(0, 15, 25, 1, 3, zombie, Output{Status: Refused, Code: "fenced"}),
		appendOp(0, 26, 1000, 1, 3, zombie, Output{Status: Unknown, Code: "timeout"}),
		appendOp(2, 21, 40, 2, 3, second, Output{Status: Ok}),
		op(3, 41, 50, Input{Kind: OpLogRead}, Output{Status: Ok, LastSeq: 3, Epoch: 2, Chain: afterSecond}),
		op(1, 42, 55, Input{Kind: OpProjRead}, Output{Status: Ok, Events: Entry(1, start, 1) + "," + Entry(2, first, 1), Count: 2}),
	}
	if result, _ := check(t, history); result != porcupine.Ok {
		t.Fatalf("a history that keeps the rules was judged %v", result)
	}
}

// What an ingest answering before the fold confirmed looks like: the fenced writer's append
// is acknowledged although the claim came first, and a log read after the acknowledgement
// does not hold it. Porcupine must refuse it, and the visualisation is written.
func TestAnAcknowledgedAppendMissingFromALaterLogReadIsNotLinearizable(t *testing.T) {
	afterClaim := NextChain(Started(1, start, 1).Chain, 2, claimID)
	history := []porcupine.Operation{
		op(2, 0, 10, Input{Kind: OpClaim}, Output{Status: Ok, Epoch: 2, NextSeq: 2, ClaimSeq: 2, ClaimID: claimID}),
		appendOp(0, 11, 20, 1, 2, zombie, Output{Status: Ok}),
		op(3, 21, 30, Input{Kind: OpLogRead}, Output{Status: Ok, LastSeq: 1, Epoch: 2, Chain: afterClaim}),
	}
	result, info := check(t, history)
	if result != porcupine.Illegal {
		t.Fatalf("a fenced writer's acknowledged append was judged %v", result)
	}
	path := filepath.Join(t.TempDir(), "violation.html")
	if err := porcupine.VisualizePath(SessionModel(Started(1, start, 1)), info, path); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("no visualisation written: %v", err)
	}
}

// Two acknowledged appends at one seq (the second writer's and the fenced one's) cannot both
// be in one history.
func TestTwoAcknowledgedEventsAtOneSeqAreNotLinearizable(t *testing.T) {
	history := []porcupine.Operation{
		op(2, 0, 10, Input{Kind: OpResume}, Output{Status: Ok, Epoch: 2, NextSeq: 2, Chain: "c"}),
		appendOp(2, 11, 20, 2, 2, second, Output{Status: Ok}),
		appendOp(0, 12, 22, 1, 2, zombie, Output{Status: Ok}),
	}
	if result, _ := check(t, history); result != porcupine.Illegal {
		t.Fatalf("two events acknowledged at seq 2 were judged %v", result)
	}
}

// A projection reader may lag but never goes backwards, nor shows an order the log has not.
func TestAProjectionReadGoingBackwardsOrOutOfOrderIsNotLinearizable(t *testing.T) {
	two := Entry(1, start, 1) + "," + Entry(2, first, 1)
	backwards := []porcupine.Operation{
		appendOp(0, 0, 10, 1, 2, first, Output{Status: Ok}),
		op(1, 11, 20, Input{Kind: OpProjRead}, Output{Status: Ok, Events: two, Count: 2}),
		op(1, 21, 30, Input{Kind: OpProjRead}, Output{Status: Ok, Events: Entry(1, start, 1), Count: 1}),
	}
	if result, _ := check(t, backwards); result != porcupine.Illegal {
		t.Fatalf("a reader going backwards was judged %v", result)
	}
	// Another reader may still be behind: that is lag, not a violation.
	lagging := append(backwards[:2:2], op(3, 21, 30, Input{Kind: OpProjRead, Reader: 1}, Output{Status: Ok, Events: Entry(1, start, 1), Count: 1}))
	if result, _ := check(t, lagging); result != porcupine.Ok {
		t.Fatalf("a second reader lagging was judged %v", result)
	}
	reordered := []porcupine.Operation{
		appendOp(0, 0, 10, 1, 2, first, Output{Status: Ok}),
		appendOp(0, 11, 20, 1, 3, second, Output{Status: Ok}),
		op(1, 21, 30, Input{Kind: OpProjRead}, Output{Status: Ok, Events: Entry(1, start, 1) + "," + Entry(2, second, 1), Count: 2}),
	}
	if result, _ := check(t, reordered); result != porcupine.Illegal {
		t.Fatalf("a projection read out of the log's order was judged %v", result)
	}
}

// An append whose answer was lost may be in the history once, or not at all.
func TestAnUnknownAppendAppearsAtMostOnce(t *testing.T) {
	withIt := NextChain(Started(1, start, 1).Chain, 2, first)
	history := []porcupine.Operation{
		appendOp(0, 0, 100, 1, 2, first, Output{Status: Unknown, Code: "timeout"}),
		op(1, 10, 20, Input{Kind: OpLogRead}, Output{Status: Ok, LastSeq: 1, Epoch: 1, Chain: Started(1, start, 1).Chain}),
		op(1, 30, 40, Input{Kind: OpLogRead}, Output{Status: Ok, LastSeq: 2, Epoch: 1, Chain: withIt}),
	}
	if result, _ := check(t, history); result != porcupine.Ok {
		t.Fatalf("an unknown append that landed late was judged %v", result)
	}
	twice := append(history[:3:3], op(1, 50, 60, Input{Kind: OpLogRead}, Output{Status: Ok, LastSeq: 3, Epoch: 1, Chain: NextChain(withIt, 3, first)}))
	if result, _ := check(t, twice); result != porcupine.Illegal {
		t.Fatalf("an unknown append accepted twice was judged %v", result)
	}
}

// The chain the model computes is the fold's: the start event of a session whose first
// event is seq 1 chains from the empty text.
func TestTheChainStartsFromTheEmptyText(t *testing.T) {
	if got := NextChain("", 1, start); len(got) != 64 || got == NextChain("", 2, start) {
		t.Fatalf("chain %q", got)
	}
	if NextChain(ChainUnknown, 1, start) != ChainUnknown {
		t.Fatal("an unknown chain stays unknown")
	}
}

// The library's doors are held to the same model as HTTP's: a library claim fences an HTTP
// writer, and a library append acknowledged after an HTTP writer's claim is a violation.
func TestTheLibrarysDoorsKeepTheSameRules(t *testing.T) {
	afterClaim := NextChain(Started(1, start, 1).Chain, 2, claimID)
	keeps := []porcupine.Operation{
		op(2, 0, 10, Input{Kind: OpLibClaim}, Output{Status: Ok, Epoch: 2, NextSeq: 2, ClaimSeq: 2, ClaimID: claimID}),
		appendOp(0, 11, 20, 1, 2, zombie, Output{Status: Refused, Code: "fenced"}),
		op(2, 21, 30, Input{Kind: OpLibAppend, Epoch: 2, Seq: 2, EventID: second}, Output{Status: Ok}),
		op(3, 31, 40, Input{Kind: OpLogRead}, Output{Status: Ok, LastSeq: 2, Epoch: 2, Chain: NextChain(afterClaim, 2, second)}),
	}
	if result, _ := check(t, keeps); result != porcupine.Ok {
		t.Fatalf("a library takeover that keeps the rules was judged %v", result)
	}
	breaks := []porcupine.Operation{
		op(2, 0, 10, Input{Kind: OpClaim}, Output{Status: Ok, Epoch: 2, NextSeq: 2, ClaimSeq: 2, ClaimID: claimID}),
		op(0, 11, 20, Input{Kind: OpLibAppend, Epoch: 1, Seq: 2, EventID: zombie}, Output{Status: Ok}),
		op(3, 21, 30, Input{Kind: OpLogRead}, Output{Status: Ok, LastSeq: 1, Epoch: 2, Chain: afterClaim}),
	}
	if result, _ := check(t, breaks); result != porcupine.Illegal {
		t.Fatalf("a fenced library writer's acknowledged append was judged %v", result)
	}
}
