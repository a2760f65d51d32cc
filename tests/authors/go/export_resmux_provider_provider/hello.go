// Package export_resmux_provider_provider is the error-path test plugin for
// Go: it replaces the scaffold's source of a project named `hello`, serves
// `hello` like the scaffold, and panics on a read of `boom`, which the SDK's
// guard must turn into an internal error instead of a trap.
package export_resmux_provider_provider

import (
	"wit_component/resmux"
	types "wit_component/resmux_provider_types"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
)

var greeting string

func About() types.PluginInfo {
	return resmux.GuardAbout(func() types.PluginInfo {
		return resmux.Info("hello", "0.1.0", "Says hello, and panics on boom")
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
	return resmux.NoTemplates(cursor)
}

func Read(path string) witTypes.Result[types.ReadResult, types.Error] {
	return resmux.Guard(func() (types.ReadResult, error) {
		switch path {
		case "hello":
			return resmux.ReadResult(resmux.Text(path, "text/plain", greeting+", world!")), nil
		case "boom":
			panic("the boom resource exploded")
		}
		return types.ReadResult{}, resmux.NotFound("no resource at %q", path)
	})
}

func Complete(request types.CompletionRequest) witTypes.Result[types.Completion, types.Error] {
	return resmux.NoCompletion(request)
}

func Changes(since witTypes.Option[string]) witTypes.Result[types.ChangeReport, types.Error] {
	return resmux.NoChanges(since)
}
