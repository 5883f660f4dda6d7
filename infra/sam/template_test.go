// Package sam holds the AWS SAM template of kvrouter's Lambda deployment and a test that checks it
// without the SAM CLI: every function points at a Go main that builds for its runtime and
// architecture, serves the paths its events route to it, gets the environment it needs, and has only
// the permissions it uses.
package sam

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kvrouter/kvrouter/functions"
	"github.com/kvrouter/kvrouter/gateway"
	"github.com/kvrouter/kvrouter/server/api"
	"github.com/kvrouter/kvrouter/statestore"
)

// toValue converts a YAML node to plain Go values; CloudFormation short forms (!Ref, !Sub, !GetAtt,
// !Select, !GetAZs) become one-key maps {"!Ref": value}.
func toValue(n *yaml.Node) any {
	var v any
	switch n.Kind {
	case yaml.DocumentNode:
		return toValue(n.Content[0])
	case yaml.MappingNode:
		m := map[string]any{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			m[n.Content[i].Value] = toValue(n.Content[i+1])
		}
		v = m
	case yaml.SequenceNode:
		s := []any{}
		for _, c := range n.Content {
			s = append(s, toValue(c))
		}
		v = s
	case yaml.AliasNode:
		return toValue(n.Alias)
	default:
		v = n.Value
	}
	if strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
		return map[string]any{n.Tag: v}
	}
	return v
}

type template struct {
	raw        map[string]any
	resources  map[string]map[string]any
	parameters map[string]any
	globals    map[string]any
}

func load(t *testing.T) template {
	t.Helper()
	b, err := os.ReadFile("template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var n yaml.Node
	if err := yaml.Unmarshal(b, &n); err != nil {
		t.Fatalf("template.yaml: %v", err)
	}
	raw := toValue(&n).(map[string]any)
	tp := template{raw: raw, resources: map[string]map[string]any{}}
	for name, r := range raw["Resources"].(map[string]any) {
		tp.resources[name] = r.(map[string]any)
	}
	tp.parameters, _ = raw["Parameters"].(map[string]any)
	g, _ := raw["Globals"].(map[string]any)
	tp.globals, _ = g["Function"].(map[string]any)
	return tp
}

func props(r map[string]any) map[string]any { p, _ := r["Properties"].(map[string]any); return p }

// fnProp returns a function property as SAM resolves it against Globals.Function: a primitive of the
// function replaces the global one, maps are merged, lists are the global entries then the function's.
func (tp template) fnProp(r map[string]any, key string) any {
	own, ok := props(r)[key]
	if !ok {
		return tp.globals[key]
	}
	return samMerge(tp.globals[key], own)
}

func samMerge(global, own any) any {
	switch o := own.(type) {
	case map[string]any:
		g, ok := global.(map[string]any)
		if !ok || isIntrinsic(o) || isIntrinsic(g) {
			return own
		}
		out := map[string]any{}
		for k, v := range g {
			out[k] = v
		}
		for k, v := range o {
			out[k] = samMerge(g[k], v)
		}
		return out
	case []any:
		if g, ok := global.([]any); ok {
			return append(append([]any{}, g...), o...)
		}
	}
	return own
}

// isIntrinsic reports a one-key map standing for a CloudFormation short form (!Ref, !Sub…).
func isIntrinsic(m map[string]any) bool {
	for k := range m {
		return len(m) == 1 && strings.HasPrefix(k, "!")
	}
	return false
}

func (tp template) functions() []string {
	var out []string
	for name, r := range tp.resources {
		if r["Type"] == "AWS::Serverless::Function" {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// endpointsOf maps a function's Go main to the endpoints its handler serves.
var endpointsOf = map[string][]string{
	"./cmd/lambda-route":    functions.RouteEndpoints,
	"./cmd/lambda-explain":  functions.ExplainEndpoints,
	"./cmd/lambda-requests": functions.RequestsEndpoints,
	"./cmd/lambda-events":   functions.EventsEndpoints,
	gatewayPkg:              nil, // fronted by the REST API, checked by TestTemplateGateway
}

// gatewayPkg is the gateway function's main; gatewayRoutes are the methods its REST API must route to it
// ("METHOD /path"), exactly the gateway's endpoints.
const gatewayPkg = "./cmd/lambda-gateway"

var gatewayRoutes = []string{"POST " + gateway.PathCompletions, "POST " + gateway.PathChatCompletions, "GET " + gateway.PathModels}

func TestTemplateStructure(t *testing.T) {
	tp := load(t)
	if tp.raw["Transform"] != "AWS::Serverless-2016-10-31" {
		t.Errorf("Transform = %v", tp.raw["Transform"])
	}
	fns := tp.functions()
	if len(fns) != len(endpointsOf) {
		t.Errorf("functions %v, want one per Lambda main (%d)", fns, len(endpointsOf))
	}
	seenPkg := map[string]bool{}
	for _, name := range fns {
		r := tp.resources[name]
		if v := tp.fnProp(r, "Runtime"); v != "provided.al2023" {
			t.Errorf("%s: Runtime %v, want provided.al2023", name, v)
		}
		if v := fmt.Sprint(tp.fnProp(r, "Architectures")); v != "[arm64]" {
			t.Errorf("%s: Architectures %v, want [arm64]", name, v)
		}
		if v := tp.fnProp(r, "Handler"); v != "bootstrap" {
			t.Errorf("%s: Handler %v, want bootstrap", name, v)
		}
		md, _ := r["Metadata"].(map[string]any)
		pkg, _ := md["GoPackage"].(string)
		eps, ok := endpointsOf[pkg]
		if !ok {
			t.Errorf("%s: Metadata.GoPackage %q is not a known Lambda main", name, pkg)
			continue
		}
		seenPkg[pkg] = true
		if want := "bin/" + filepath.Base(pkg) + "/"; props(r)["CodeUri"] != want {
			t.Errorf("%s: CodeUri %v, want %s (where build.sh puts the bootstrap)", name, props(r)["CodeUri"], want)
		}
		build, _ := os.ReadFile("build.sh")
		if !strings.Contains(string(build), filepath.Base(pkg)) || !strings.Contains(string(build), "-tags lambda.norpc") {
			t.Errorf("%s: build.sh does not build %s with -tags lambda.norpc", name, pkg)
		}
		// Least privilege: VPC ENI management only.
		pol := fmt.Sprint(tp.fnProp(r, "Policies"))
		if pol != "[map[VPCAccessPolicy:map[]]]" {
			t.Errorf("%s: Policies %s, want only VPCAccessPolicy", name, pol)
		}
		if fu, ok := props(r)["FunctionUrlConfig"].(map[string]any); ok && fu["AuthType"] != "AWS_IAM" {
			t.Errorf("%s: Function URL AuthType %v, want AWS_IAM", name, fu["AuthType"])
		}
		if vpc, _ := tp.fnProp(r, "VpcConfig").(map[string]any); vpc == nil || vpc["SubnetIds"] == nil || vpc["SecurityGroupIds"] == nil {
			t.Errorf("%s: no VpcConfig (the cache is only reachable inside the VPC)", name)
		}
		if pkg == gatewayPkg {
			continue // no HttpApi events: TestTemplateGateway checks its REST API
		}
		// Every routed path is served by the function's handler, and every served endpoint is routed.
		served := map[string]bool{}
		for _, e := range eps {
			served[e] = false
		}
		evs, _ := props(r)["Events"].(map[string]any)
		for evName, e := range evs {
			em := e.(map[string]any)
			if em["Type"] != "HttpApi" {
				t.Errorf("%s.%s: event type %v, want HttpApi", name, evName, em["Type"])
				continue
			}
			ep := props(em)
			path := fmt.Sprint(ep["Path"])
			concrete := regexp.MustCompile(`\{[^}]+\}`).ReplaceAllString(path, "x")
			endpoint := api.Endpoint(concrete)
			if _, ok := served[endpoint]; !ok {
				t.Errorf("%s.%s: path %s (endpoint %s) is not served by %s (serves %v)", name, evName, path, endpoint, pkg, eps)
			}
			served[endpoint] = true
			if ep["Method"] != "POST" {
				t.Errorf("%s.%s: method %v, want POST", name, evName, ep["Method"])
			}
			if ref, _ := ep["ApiId"].(map[string]any); ref["!Ref"] != "Api" {
				t.Errorf("%s.%s: not attached to the IAM-authorised Api", name, evName)
			}
		}
		for e, ok := range served {
			if !ok {
				t.Errorf("%s: endpoint %s is not routed by any event", name, e)
			}
		}
	}
	for pkg := range endpointsOf {
		if !seenPkg[pkg] {
			t.Errorf("no function deploys %s", pkg)
		}
	}
	cache := tp.resources["Cache"]
	cp := props(cache)
	if cache["Type"] != "AWS::ElastiCache::ReplicationGroup" || cp["TransitEncryptionEnabled"] != "true" {
		t.Errorf("Cache: %v %v", cache["Type"], cp["TransitEncryptionEnabled"])
	}
	// Ingress to the cache only from the functions' security group.
	ing := fmt.Sprint(props(tp.resources["CacheSecurityGroup"])["SecurityGroupIngress"])
	if !strings.Contains(ing, "map[!Ref:FunctionSecurityGroup]") || strings.Contains(ing, "0.0.0.0/0") {
		t.Errorf("CacheSecurityGroup ingress %s", ing)
	}
}

// cacheEndpoint stands in for what CloudFormation resolves the cache's attributes to at deploy time
// (the port deliberately not Redis' default, so a hard-coded 6379 would show).
var cacheEndpoint = map[string]string{
	"Cache.PrimaryEndPoint.Address": "kvrouter-cache.abc123.ng.0001.euw1.cache.amazonaws.com",
	"Cache.PrimaryEndPoint.Port":    "6380",
}

// functionEnv is a function's environment as deployed: the Globals' variables merged with its own,
// !Ref resolved to the parameter's default, !Sub's ${Cache.…} to cacheEndpoint. Anything else it cannot
// resolve fails the test.
func functionEnv(t *testing.T, tp template, fnName string) map[string]string {
	t.Helper()
	env, _ := tp.fnProp(tp.resources[fnName], "Environment").(map[string]any)
	vars, _ := env["Variables"].(map[string]any)
	out := map[string]string{}
	for k, v := range vars {
		switch x := v.(type) {
		case string:
			out[k] = x
		case map[string]any:
			if ref, ok := x["!Ref"].(string); ok {
				p, ok := tp.parameters[ref].(map[string]any)
				if !ok || p["Default"] == nil {
					t.Fatalf("%s: %s = !Ref %s: no such parameter with a default", fnName, k, ref)
				}
				out[k] = fmt.Sprint(p["Default"])
			} else if sub, ok := x["!Sub"].(string); ok {
				out[k] = regexp.MustCompile(`\$\{([^}]+)\}`).ReplaceAllStringFunc(sub, func(m string) string {
					r, ok := cacheEndpoint[m[2:len(m)-1]]
					if !ok {
						t.Fatalf("%s: %s = !Sub %q: cannot resolve %s", fnName, k, sub, m)
					}
					return r
				})
			} else {
				t.Fatalf("%s: %s = %v: unsupported intrinsic", fnName, k, x)
			}
		default:
			t.Fatalf("%s: %s = %v (%T): want a string or an intrinsic", fnName, k, v, v)
		}
	}
	return out
}

// TestTemplateEnvironment: the environment every function gets, as deployed, is accepted by
// functions.ConfigFromEnv, which reads every variable the template sets (a misspelt name fails), and
// the resulting config points at the cache's primary endpoint over TLS with the template's pool, block
// size, timeout and log level.
func TestTemplateEnvironment(t *testing.T) {
	tp := load(t)
	for _, fn := range tp.functions() {
		env := functionEnv(t, tp, fn)
		read := map[string]bool{}
		c, err := functions.ConfigFromEnv(func(k string) string { read[k] = true; return env[k] })
		if err != nil {
			t.Fatalf("%s: functions reject the template's environment %v: %v", fn, env, err)
		}
		for k := range env {
			if !read[k] {
				t.Errorf("%s: the template sets %s, which functions.ConfigFromEnv never reads", fn, k)
			}
		}
		opt, _, err := statestore.ParseRedisURL(c.Store)
		wantAddr := cacheEndpoint["Cache.PrimaryEndPoint.Address"] + ":" + cacheEndpoint["Cache.PrimaryEndPoint.Port"]
		if err != nil || opt.TLSConfig == nil || len(opt.InitAddress) != 1 || opt.InitAddress[0] != wantAddr {
			t.Errorf("%s: store %q (err %v, TLS %v, addresses %v), want TLS to the cache's primary endpoint %s",
				fn, c.Store, err, opt.TLSConfig != nil, opt.InitAddress, wantAddr)
		}
		blockSize, _ := tp.parameters["BlockSize"].(map[string]any)
		logLevel, _ := tp.parameters["LogLevel"].(map[string]any)
		timeout, err := time.ParseDuration(env["KVROUTER_STORE_TIMEOUT"])
		if err != nil {
			t.Errorf("%s: KVROUTER_STORE_TIMEOUT %q: %v", fn, env["KVROUTER_STORE_TIMEOUT"], err)
		}
		if got, want := fmt.Sprint(c.Pool, " ", c.BlockSize, " ", c.StoreTimeout, " ", c.LogLevel),
			fmt.Sprint(env["KVROUTER_POOL"], " ", blockSize["Default"], " ", timeout, " ", logLevel["Default"]); got != want {
			t.Errorf("%s: pool, block size, store timeout, log level = %s, want the template's %s", fn, got, want)
		}
		// The store timeout is below the function's Timeout (s), so a stuck cache fails a call with a 503
		// before Lambda kills the invocation.
		if limit, err := time.ParseDuration(fmt.Sprint(tp.fnProp(tp.resources[fn], "Timeout")) + "s"); err != nil || c.StoreTimeout >= limit {
			t.Errorf("%s: store timeout %s, function Timeout %v", fn, c.StoreTimeout, tp.fnProp(tp.resources[fn], "Timeout"))
		}
	}
}

// TestTemplateReferences: every !Ref, !GetAtt and ${...} names a parameter, a resource, a pseudo
// parameter or a SAM-generated resource.
func TestTemplateReferences(t *testing.T) {
	tp := load(t)
	known := map[string]bool{}
	for n := range tp.parameters {
		known[n] = true
	}
	for n, r := range tp.resources {
		known[n] = true
		if _, ok := props(r)["FunctionUrlConfig"]; ok {
			known[n+"Url"] = true // SAM generates <Function>Url
		}
	}
	var walk func(v any)
	check := func(name string) {
		name = strings.SplitN(name, ".", 2)[0]
		if !known[name] && !strings.HasPrefix(name, "AWS::") {
			t.Errorf("reference to unknown %q", name)
		}
	}
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				switch k {
				case "!Ref", "!GetAtt":
					if s, ok := c.(string); ok {
						check(s)
					}
				case "!Sub":
					if s, ok := c.(string); ok {
						for _, m := range regexp.MustCompile(`\$\{([^}]+)\}`).FindAllStringSubmatch(s, -1) {
							check(m[1])
						}
					}
				}
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	walk(tp.raw["Resources"])
	walk(tp.raw["Globals"])
	walk(tp.raw["Outputs"])
}

// TestHandlersBuild builds every function's main exactly as build.sh does and checks the result is a
// static linux/arm64 executable, what provided.al2023 on arm64 runs as "bootstrap".
func TestHandlersBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds four linux/arm64 binaries: skipped in -short mode")
	}
	tp := load(t)
	dir := t.TempDir()
	for _, name := range tp.functions() {
		md, _ := tp.resources[name]["Metadata"].(map[string]any)
		pkg := md["GoPackage"].(string)
		out := filepath.Join(dir, name, "bootstrap")
		cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-trimpath", "-o", out, pkg)
		cmd.Dir = "../.."
		cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: build %s: %v\n%s", name, pkg, err, b)
			continue
		}
		f, err := elf.Open(out)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if f.Machine != elf.EM_AARCH64 {
			t.Errorf("%s: machine %v, want aarch64", name, f.Machine)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s: dynamically linked (has an interpreter)", name)
			}
		}
		f.Close()
	}
}

// TestTemplateGateway: the gateway function is reachable only through a REGIONAL REST API whose methods
// are exactly the gateway's endpoints, each a Lambda proxy integration in response transfer mode STREAM
// over InvokeWithResponseStream; API Gateway may invoke the function from that API only; the function
// (VPC-attached, so no Function URL: those do not stream from a VPC) may run as long as a stream may
// last, gives up on a silent engine before API Gateway's idle timeout, and may reach the engines and the
// cache only.
func TestTemplateGateway(t *testing.T) {
	tp := load(t)
	var fnName string
	for _, name := range tp.functions() {
		md, _ := tp.resources[name]["Metadata"].(map[string]any)
		if md["GoPackage"] == gatewayPkg {
			fnName = name
		}
	}
	if fnName == "" {
		t.Fatalf("no function deploys %s", gatewayPkg)
	}
	fn := props(tp.resources[fnName])
	if _, ok := fn["FunctionUrlConfig"]; ok {
		t.Errorf("%s: has a Function URL: it would not stream from a VPC-attached function", fnName)
	}
	if evs, _ := fn["Events"].(map[string]any); len(evs) > 0 {
		t.Errorf("%s: events %v: HTTP APIs do not stream; only the REST API may invoke it", fnName, evs)
	}
	if fmt.Sprint(fn["Timeout"]) != "900" {
		t.Errorf("%s: Timeout %v, want 900 s (the longest stream API Gateway allows)", fnName, fn["Timeout"])
	}
	vpc, _ := tp.fnProp(tp.resources[fnName], "VpcConfig").(map[string]any)
	if sgs := fmt.Sprint(vpc["SecurityGroupIds"]); sgs != "[map[!Ref:FunctionSecurityGroup] map[!Ref:GatewayEngineSecurityGroup]]" {
		t.Errorf("%s: security groups %s, want the cache's and the engines' egress, once each", fnName, sgs)
	}
	if subnets := fmt.Sprint(vpc["SubnetIds"]); subnets != "[map[!Ref:PrivateSubnetA] map[!Ref:PrivateSubnetB]]" {
		t.Errorf("%s: subnets %s, want the two private subnets once each", fnName, subnets)
	}
	egress := fmt.Sprint(props(tp.resources["GatewayEngineSecurityGroup"])["SecurityGroupEgress"])
	if strings.Contains(egress, "0.0.0.0/0") || !strings.Contains(egress, "EngineCidr") {
		t.Errorf("GatewayEngineSecurityGroup egress %s, want the engines' CIDR only", egress)
	}
	// The function's own environment over the globals is accepted, and its idle timeout is below API
	// Gateway's 5 minutes on a REGIONAL endpoint.
	env := functionEnv(t, tp, fnName)
	c, err := functions.ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("%s: environment %v rejected: %v", fnName, env, err)
	}
	if c.ProxyIdleTimeout <= 0 || c.ProxyIdleTimeout >= 5*time.Minute {
		t.Errorf("%s: proxy idle timeout %s, want below API Gateway's 5 min stream idle timeout", fnName, c.ProxyIdleTimeout)
	}

	var apiName string
	for name, r := range tp.resources {
		if r["Type"] == "AWS::ApiGateway::RestApi" {
			apiName = name
		}
	}
	if apiName == "" {
		t.Fatal("no AWS::ApiGateway::RestApi")
	}
	if types := fmt.Sprint(props(tp.resources[apiName])["EndpointConfiguration"]); types != "map[Types:[REGIONAL]]" {
		t.Errorf("%s: endpoint configuration %s, want REGIONAL (an edge-optimized endpoint cuts streams idle for 30 s)", apiName, types)
	}
	// The path of a resource, walking its parents up to the API's root.
	var pathOf func(ref any) string
	pathOf = func(ref any) string {
		m, _ := ref.(map[string]any)
		if ga, ok := m["!GetAtt"]; ok {
			if ga != apiName+".RootResourceId" {
				t.Errorf("parent %v is not %s's root", ga, apiName)
			}
			return ""
		}
		name, _ := m["!Ref"].(string)
		r := tp.resources[name]
		if r["Type"] != "AWS::ApiGateway::Resource" {
			t.Fatalf("parent %v is not a resource", ref)
		}
		return pathOf(props(r)["ParentId"]) + "/" + fmt.Sprint(props(r)["PathPart"])
	}
	wantURI := "arn:${AWS::Partition}:apigateway:${AWS::Region}:lambda:path/2021-11-15/functions/${" + fnName + ".Arn}/response-streaming-invocations"
	var routes []string
	for name, r := range tp.resources {
		if r["Type"] != "AWS::ApiGateway::Method" {
			continue
		}
		p := props(r)
		if ref, _ := p["RestApiId"].(map[string]any); ref["!Ref"] != apiName {
			t.Errorf("%s: not on %s", name, apiName)
		}
		routes = append(routes, fmt.Sprint(p["HttpMethod"])+" "+pathOf(p["ResourceId"]))
		if p["AuthorizationType"] != "AWS_IAM" {
			t.Errorf("%s: AuthorizationType %v, want AWS_IAM like the other endpoints", name, p["AuthorizationType"])
		}
		in, _ := p["Integration"].(map[string]any)
		uri, _ := in["Uri"].(map[string]any)
		if in["Type"] != "AWS_PROXY" || in["IntegrationHttpMethod"] != "POST" || in["ResponseTransferMode"] != "STREAM" ||
			uri["!Sub"] != wantURI || fmt.Sprint(in["TimeoutInMillis"]) != "900000" {
			t.Errorf("%s: integration %v, want AWS_PROXY POST to %s, ResponseTransferMode STREAM, TimeoutInMillis 900000", name, in, wantURI)
		}
	}
	sort.Strings(routes)
	want := append([]string(nil), gatewayRoutes...)
	sort.Strings(want)
	if fmt.Sprint(routes) != fmt.Sprint(want) {
		t.Errorf("REST API routes %v, want exactly the gateway's endpoints %v", routes, want)
	}
	// Deployed (a stage), and API Gateway may invoke the function from this API only.
	var deployed, permitted bool
	for name, r := range tp.resources {
		p := props(r)
		switch r["Type"] {
		case "AWS::ApiGateway::Deployment":
			ref, _ := p["RestApiId"].(map[string]any)
			deployed = ref["!Ref"] == apiName && p["StageName"] != nil && len(fmt.Sprint(r["DependsOn"])) > 2
		case "AWS::Lambda::Permission":
			fnRef, _ := p["FunctionName"].(map[string]any)
			src, _ := p["SourceArn"].(map[string]any)
			if fnRef["!GetAtt"] == fnName+".Arn" {
				permitted = p["Action"] == "lambda:InvokeFunction" && p["Principal"] == "apigateway.amazonaws.com" &&
					strings.Contains(fmt.Sprint(src["!Sub"]), ":${"+apiName+"}/")
				if !permitted {
					t.Errorf("%s: %v", name, p)
				}
			}
		}
	}
	if !deployed {
		t.Errorf("%s is not deployed to a stage after its methods", apiName)
	}
	if !permitted {
		t.Errorf("no AWS::Lambda::Permission lets %s invoke %s", apiName, fnName)
	}
}
