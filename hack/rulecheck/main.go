// rulecheck: the rule-file check of `promtool check rules`, from Prometheus's own packages:
// model/rulefmt parses the groups strictly and validates every PromQL expression, label and
// annotation template, as promtool does (same parser options). It leaves out the rest of promtool,
// whose cold build pulls every service-discovery SDK and takes far longer.
//
//	hack/build-go-tool.sh rulecheck && ~/.cache/trawl/tools/rulecheck-*/rulecheck FILE...
package main

import (
	"fmt"
	"os"

	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: rulecheck FILE...")
		os.Exit(2)
	}
	p := parser.NewParser(parser.Options{})
	failed := false
	for _, path := range os.Args[1:] {
		groups, errs := rulefmt.ParseFile(path, false, model.UTF8Validation, p, promslog.NewNopLogger())
		if len(errs) > 0 {
			failed = true
			fmt.Fprintf(os.Stderr, "%s: FAILED:\n", path)
			for _, err := range errs {
				fmt.Fprintln(os.Stderr, err)
			}
			continue
		}
		n := 0
		for _, g := range groups.Groups {
			n += len(g.Rules)
		}
		fmt.Printf("%s: SUCCESS: %d rules found\n", path, n)
	}
	if failed {
		os.Exit(1)
	}
}
