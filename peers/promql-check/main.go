// Command promql-check parses every PromQL expression of Grafana dashboards with Prometheus'
// own parser (github.com/prometheus/prometheus/promql/parser), as Prometheus would when the
// dashboard queries it, so a typo fails a check instead of a panel at 3 a.m.
//
// Usage: promql-check dashboard.json...
//
// Grafana fills in variables before it sends a query; here they are filled in the same way:
// the interval variables ($__rate_interval, $__interval, $__range, ...) become "5m", and the
// dashboard's own template variables become the regular expression ".+" (they stand inside
// label matchers, where a regex must compile; one outside quotes makes the expression fail,
// as it would in Grafana with a multi-value selection). A variable the dashboard does not
// define is an error. The selectors of query variables (label_values(<selector>, <label>),
// query_result(<expr>)) are parsed too.
//
// It prints one line per failing expression, naming the file, the panel (id and title) and
// the target, and exits 1 if any failed; 2 for unreadable input.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/prometheus/prometheus/promql/parser"
)

// Grafana's interval variables: all of them durations.
var intervals = map[string]bool{
	"__rate_interval":    true,
	"__interval":         true,
	"__range":            true,
	"__range_s":          true,
	"__interval_ms":      true,
	"__rate_interval_ms": true,
}

// $name, ${name}, ${name:format} and [[name]]: Grafana's variable syntaxes.
var variable = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[^}]*)?\}|\$([A-Za-z0-9_]+)|\[\[([A-Za-z0-9_]+)(?::[^\]]*)?\]\]`)

// The default parser, as a Prometheus server without experimental features has it: it
// type-checks as it parses (rate() of an instant vector fails here, as in Prometheus).
var promql = parser.NewParser(parser.Options{})

type checker struct {
	file    string
	defined map[string]bool
	checked int
	failed  int
}

// substitute fills in the variables of expr, or says which one the dashboard lacks.
func (c *checker) substitute(expr string) (string, error) {
	var missing []string
	out := variable.ReplaceAllStringFunc(expr, func(m string) string {
		g := variable.FindStringSubmatch(m)
		name := g[1] + g[2] + g[3]
		switch {
		case intervals[name]:
			return "5m"
		case c.defined[name]:
			return ".+"
		default:
			missing = append(missing, "$"+name)
			return m
		}
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("undefined variable(s) %s", strings.Join(missing, ", "))
	}
	return out, nil
}

// check parses one expression; where names the panel and target it came from.
func (c *checker) check(where, expr string) {
	c.checked++
	if strings.TrimSpace(expr) == "" {
		c.fail(where, "empty expression")
		return
	}
	filled, err := c.substitute(expr)
	if err == nil {
		_, err = promql.ParseExpr(filled)
	}
	if err != nil {
		c.fail(where, fmt.Sprintf("%v\n    in: %s", err, expr))
	}
}

func (c *checker) fail(where, msg string) {
	c.failed++
	fmt.Printf("%s: %s: %s\n", c.file, where, msg)
}

// panels walks a panel list, rows' collapsed panels included.
func (c *checker) panels(list []any) int {
	n := 0
	for _, p := range list {
		panel, ok := p.(map[string]any)
		if !ok {
			continue
		}
		n++
		where := fmt.Sprintf("panel %v %q", panel["id"], panel["title"])
		targets, _ := panel["targets"].([]any)
		for i, t := range targets {
			target, ok := t.(map[string]any)
			if !ok {
				continue
			}
			expr, ok := target["expr"].(string)
			if !ok {
				continue
			}
			ref, _ := target["refId"].(string)
			if ref == "" {
				ref = fmt.Sprint(i)
			}
			c.check(fmt.Sprintf("%s target %s", where, ref), expr)
		}
		if nested, ok := panel["panels"].([]any); ok {
			n += c.panels(nested)
		}
	}
	return n
}

// Query variables: the PromQL inside Grafana's helper functions.
var (
	labelValues = regexp.MustCompile(`^\s*label_values\(\s*(.*?)\s*,\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$`)
	queryResult = regexp.MustCompile(`^\s*query_result\((.*)\)\s*$`)
)

func (c *checker) variables(list []any) {
	for _, v := range list {
		tv, ok := v.(map[string]any)
		if !ok || tv["type"] != "query" {
			continue
		}
		q, ok := tv["query"].(string)
		if !ok {
			// Newer Grafana keeps the query in an object.
			if obj, ok := tv["query"].(map[string]any); ok {
				q, _ = obj["query"].(string)
			}
		}
		where := fmt.Sprintf("variable %q", tv["name"])
		switch {
		case labelValues.MatchString(q):
			c.check(where, labelValues.FindStringSubmatch(q)[1])
		case queryResult.MatchString(q):
			c.check(where, queryResult.FindStringSubmatch(q)[1])
		default:
			c.fail(where, fmt.Sprintf("not label_values(<selector>, <label>) or query_result(<expr>): %q", q))
		}
	}
}

func run(file string) (*checker, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var dash map[string]any
	if err := json.Unmarshal(raw, &dash); err != nil {
		return nil, fmt.Errorf("%s: not JSON: %w", file, err)
	}
	c := &checker{file: file, defined: map[string]bool{}}
	templating, _ := dash["templating"].(map[string]any)
	vars, _ := templating["list"].([]any)
	for _, v := range vars {
		if tv, ok := v.(map[string]any); ok {
			if name, ok := tv["name"].(string); ok {
				c.defined[name] = true
			}
		}
	}
	c.variables(vars)
	list, _ := dash["panels"].([]any)
	n := c.panels(list)
	if c.checked == 0 {
		return nil, fmt.Errorf("%s: no expressions found in %d panels", file, n)
	}
	fmt.Printf("%s: %d expressions in %d panels and variables checked, %d failed\n", file, c.checked, n, c.failed)
	return c, nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: promql-check dashboard.json...")
		os.Exit(2)
	}
	failed := 0
	for _, f := range os.Args[1:] {
		c, err := run(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "promql-check:", err)
			os.Exit(2)
		}
		failed += c.failed
	}
	if failed > 0 {
		os.Exit(1)
	}
}
