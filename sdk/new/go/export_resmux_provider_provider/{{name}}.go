// Package export_resmux_provider_provider is `{{name}}`, a resmux plugin in
// Go. It greets: `hello` reads "<greeting>, world!" and `hello/{who}` reads
// "<greeting>, <who>!", with the greeting taken from the manifest's [config].
// Every exported function is one of the contract's, its body wrapped in a
// guard of the SDK (package resmux). Replace it with your own.
package export_resmux_provider_provider

import (
	"strings"

	"wit_component/resmux"
	types "wit_component/resmux_provider_types"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
)

var names = []string{"ada", "alan", "grace", "linus"}

// greeting is what Init read from the config: resmux calls Init on every
// instance before any other call.
var greeting string

func About() types.PluginInfo {
	return resmux.GuardAbout(func() types.PluginInfo {
		return resmux.Info("{{name}}", "0.1.0", "Says hello to the world, or to anyone")
	})
}

func Init(pairs []witTypes.Tuple2[string, string]) witTypes.Result[witTypes.Unit, types.Error] {
	return resmux.Guard(func() (witTypes.Unit, error) {
		config := resmux.NewConfig(pairs)
		greeting = config.Text("greeting", "Hello")
		return witTypes.Unit{}, config.Finish()
	})
}

func List(cursor witTypes.Option[string]) witTypes.Result[types.ResourcePage, types.Error] {
	return resmux.Guard(func() (types.ResourcePage, error) {
		all := []types.Resource{resmux.Resource("hello", "hello", resmux.MimeType("text/plain"))}
		resources, next, err := resmux.Paginate(all, cursor, 100)
		if err != nil {
			return types.ResourcePage{}, err
		}
		return resmux.ResourcePage(resources, next), nil
	})
}

func Templates(cursor witTypes.Option[string]) witTypes.Result[types.TemplatePage, types.Error] {
	return resmux.Guard(func() (types.TemplatePage, error) {
		if err := resmux.NoCursor(cursor); err != nil {
			return types.TemplatePage{}, err
		}
		who := resmux.Template("hello/{who}", "greeting", resmux.MimeType("text/plain"))
		return resmux.TemplatePage([]types.Template{who}, witTypes.None[string]()), nil
	})
}

func Read(path string) witTypes.Result[types.ReadResult, types.Error] {
	return resmux.Guard(func() (types.ReadResult, error) {
		if path == "hello" {
			return resmux.ReadResult(resmux.Text(path, "text/plain", greeting+", world!")), nil
		}
		who, found := strings.CutPrefix(path, "hello/")
		if !found || who == "" || strings.Contains(who, "/") {
			return types.ReadResult{}, resmux.NotFound("no resource at %q", path)
		}
		return resmux.ReadResult(resmux.Text(path, "text/plain", greeting+", "+who+"!")), nil
	})
}

func Complete(request types.CompletionRequest) witTypes.Result[types.Completion, types.Error] {
	return resmux.Guard(func() (types.Completion, error) {
		if request.PathTemplate != "hello/{who}" || request.Argument != "who" {
			return types.Completion{}, resmux.InvalidInput("%q has no completion for %q", request.PathTemplate, request.Argument)
		}
		matches := []string{}
		for _, name := range names {
			if strings.HasPrefix(name, request.Value) {
				matches = append(matches, name)
			}
		}
		return resmux.Completion(matches), nil
	})
}

func Changes(since witTypes.Option[string]) witTypes.Result[types.ChangeReport, types.Error] {
	return resmux.Guard(func() (types.ChangeReport, error) {
		return resmux.Unchanged("0"), nil
	})
}
