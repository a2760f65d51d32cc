// Package export_resmux_provider_provider is `units`: unit conversions as
// resources. The Go example, built with Go's wasip1 target and the bindings
// resmux-plugin-build writes.
//
// Each known unit is a resource `units/NAME` describing it; the template
// `convert/{value}/{from}/{to}` converts a number between two units of one
// dimension, and its completion offers only the units that fit the ones
// already chosen. Nothing here ever changes, so every answer may be cached
// for a day.
package export_resmux_provider_provider

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	types "wit_component/resmux_provider_types"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
)

type unit struct {
	name      string
	dimension string
	// How many base units (metre, kilogram, second, kelvin) one of it is;
	// temperatures also carry an offset.
	factor float64
	offset float64
}

var units = []unit{
	{"metre", "length", 1, 0},
	{"kilometre", "length", 1000, 0},
	{"centimetre", "length", 0.01, 0},
	{"mile", "length", 1609.344, 0},
	{"foot", "length", 0.3048, 0},
	{"inch", "length", 0.0254, 0},
	{"kilogram", "mass", 1, 0},
	{"gram", "mass", 0.001, 0},
	{"pound", "mass", 0.45359237, 0},
	{"ounce", "mass", 0.028349523125, 0},
	{"second", "time", 1, 0},
	{"minute", "time", 60, 0},
	{"hour", "time", 3600, 0},
	{"day", "time", 86400, 0},
	{"kelvin", "temperature", 1, 0},
	{"celsius", "temperature", 1, 273.15},
	{"fahrenheit", "temperature", 5.0 / 9.0, 459.67 * 5.0 / 9.0},
}

var day = witTypes.Some(types.CacheHint{TtlMs: 86_400_000, Scope: types.CacheScope_Public})

func find(name string) (unit, bool) {
	for _, candidate := range units {
		if candidate.name == name {
			return candidate, true
		}
	}
	return unit{}, false
}

func none() witTypes.Option[string] { return witTypes.None[string]() }

func About() types.PluginInfo {
	return types.PluginInfo{Name: "units", Version: "0.1.0", Description: "Unit conversions as resources (Go)"}
}

func Init(config []witTypes.Tuple2[string, string]) witTypes.Result[witTypes.Unit, types.Error] {
	for _, pair := range config {
		return witTypes.Err[witTypes.Unit](types.MakeErrorInvalidInput(fmt.Sprintf("unknown config key %q", pair.F0)))
	}
	return witTypes.Ok[witTypes.Unit, types.Error](witTypes.Unit{})
}

func List(cursor witTypes.Option[string]) witTypes.Result[types.ResourcePage, types.Error] {
	if cursor.IsSome() {
		return witTypes.Err[types.ResourcePage](types.MakeErrorInvalidInput(fmt.Sprintf("unknown cursor %q", cursor.Some())))
	}
	resources := make([]types.Resource, 0, len(units))
	for _, u := range units {
		resources = append(resources, types.Resource{
			Path:        "units/" + u.name,
			Name:        u.name,
			Description: witTypes.Some(fmt.Sprintf("a unit of %s", u.dimension)),
			MimeType:    witTypes.Some("text/plain"),
			Title:       none(),
			Meta:        none(),
		})
	}
	return witTypes.Ok[types.ResourcePage, types.Error](types.ResourcePage{Resources: resources, Cache: day})
}

func Templates(cursor witTypes.Option[string]) witTypes.Result[types.TemplatePage, types.Error] {
	if cursor.IsSome() {
		return witTypes.Err[types.TemplatePage](types.MakeErrorInvalidInput(fmt.Sprintf("unknown cursor %q", cursor.Some())))
	}
	convert := types.Template{
		PathTemplate: "convert/{value}/{from}/{to}",
		Name:         "convert",
		Description:  witTypes.Some("A number converted between two units of one dimension"),
		MimeType:     witTypes.Some("text/plain"),
		Title:        none(),
		Meta:         none(),
	}
	return witTypes.Ok[types.TemplatePage, types.Error](types.TemplatePage{Templates: []types.Template{convert}, Cache: day})
}

func text(path, body string) witTypes.Result[types.ReadResult, types.Error] {
	content := types.Content{Path: path, MimeType: witTypes.Some("text/plain"), Body: types.MakeBodyText(body), Meta: none()}
	return witTypes.Ok[types.ReadResult, types.Error](types.ReadResult{Contents: []types.Content{content}, Cache: day})
}

func notFound(format string, arguments ...any) witTypes.Result[types.ReadResult, types.Error] {
	return witTypes.Err[types.ReadResult](types.MakeErrorNotFound(fmt.Sprintf(format, arguments...)))
}

func Read(path string) witTypes.Result[types.ReadResult, types.Error] {
	parts := strings.Split(path, "/")
	switch {
	case len(parts) == 2 && parts[0] == "units":
		u, ok := find(parts[1])
		if !ok {
			return notFound("there is no unit %q", parts[1])
		}
		return text(path, fmt.Sprintf("%s: a unit of %s", u.name, u.dimension))
	case len(parts) == 4 && parts[0] == "convert":
		value, err := strconv.ParseFloat(parts[1], 64)
		if err != nil {
			return notFound("%q is not a number", parts[1])
		}
		from, okFrom := find(parts[2])
		to, okTo := find(parts[3])
		if !okFrom || !okTo {
			return notFound("unknown unit in %q", path)
		}
		if from.dimension != to.dimension {
			return notFound("%s is %s and %s is %s", from.name, from.dimension, to.name, to.dimension)
		}
		base := value*from.factor + from.offset
		return text(path, strconv.FormatFloat((base-to.offset)/to.factor, 'g', 12, 64))
	}
	return notFound("%q is neither units/NAME nor convert/VALUE/FROM/TO", path)
}

func Complete(request types.CompletionRequest) witTypes.Result[types.Completion, types.Error] {
	if request.PathTemplate != "convert/{value}/{from}/{to}" || (request.Argument != "from" && request.Argument != "to") {
		return witTypes.Err[types.Completion](types.MakeErrorInvalidInput(fmt.Sprintf("cannot complete %q", request.Argument)))
	}
	dimension := ""
	for _, chosen := range request.Context {
		if chosen.F0 == "from" || chosen.F0 == "to" {
			if u, ok := find(chosen.F1); ok && chosen.F0 != request.Argument {
				dimension = u.dimension
			}
		}
	}
	values := []string{}
	for _, u := range units {
		if strings.HasPrefix(u.name, request.Value) && (dimension == "" || u.dimension == dimension) {
			values = append(values, u.name)
		}
	}
	sort.Strings(values)
	return witTypes.Ok[types.Completion, types.Error](types.Completion{
		Values: values,
		Total:  witTypes.Some(uint32(len(values))),
	})
}

func Changes(since witTypes.Option[string]) witTypes.Result[types.ChangeReport, types.Error] {
	return witTypes.Ok[types.ChangeReport, types.Error](types.ChangeReport{Token: "static", ChangedPaths: []string{}})
}
