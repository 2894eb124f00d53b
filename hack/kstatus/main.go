// kstatus: what Flux (and every tool built on sigs.k8s.io/cli-utils) computes as an object's health,
// from the library itself: status.Compute on each object, exactly as kustomize-controller's health
// checks and `flux`/`kapply` waits call it. The cluster tests run it on live objects read from the API
// server (`kubectl get -o json`), so what the docs say a state reads as is checked against kstatus, not
// against a re-implementation of its rules.
//
//	kubectl get scrapejobs -o json | kstatus
//	ScrapeJob/crawl Current Resource is Ready
//
// Input: one or more JSON documents on stdin, each an object or a List of objects. Output: one line per
// object, `<Kind>/<name> <status> <message>`, status being kstatus's (InProgress, Failed, Current,
// Terminating, NotFound, Unknown). Exit status 1 if a document cannot be read or computed.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func main() {
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "usage: kstatus < objects.json  (an object or a List per JSON document)")
		os.Exit(2)
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	if err := run(os.Stdin, out); err != nil {
		out.Flush()
		fmt.Fprintln(os.Stderr, "kstatus:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	dec := json.NewDecoder(in)
	for {
		var doc json.RawMessage
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("reading JSON: %w", err)
		}
		objs, err := objects(doc)
		if err != nil {
			return err
		}
		for _, u := range objs {
			res, err := status.Compute(u)
			if err != nil {
				return fmt.Errorf("%s/%s: %w", u.GetKind(), u.GetName(), err)
			}
			// One line per object: a message never spans lines.
			msg := strings.Join(strings.Fields(res.Message), " ")
			fmt.Fprintf(out, "%s/%s %s %s\n", u.GetKind(), u.GetName(), res.Status, msg)
		}
	}
}

// objects decodes a document the way the API machinery does (integers stay int64, which
// status.Compute's generation check requires; a List becomes its items).
func objects(doc []byte) ([]*unstructured.Unstructured, error) {
	obj, err := runtime.Decode(unstructured.UnstructuredJSONScheme, doc)
	if err != nil {
		return nil, fmt.Errorf("decoding object: %w", err)
	}
	switch o := obj.(type) {
	case *unstructured.UnstructuredList:
		items := make([]*unstructured.Unstructured, len(o.Items))
		for i := range o.Items {
			items[i] = &o.Items[i]
		}
		return items, nil
	case *unstructured.Unstructured:
		return []*unstructured.Unstructured{o}, nil
	default:
		return nil, fmt.Errorf("unexpected object %T", obj)
	}
}
