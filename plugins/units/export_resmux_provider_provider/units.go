// Package export_resmux_provider_provider is `units`: unit conversions as
// resources. The Go example, built with Go's wasip1 target, the bindings
// `resmux bindings go` writes and the Go SDK (sdk/go/resmux).
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
	"time"

	"wit_component/resmux"
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

var day = resmux.Cache(24*time.Hour, types.CacheScope_Public)

func find(name string) (unit, bool) {
	for _, candidate := range units {
		if candidate.name == name {
			return candidate, true
		}
	}
	return unit{}, false
}

func About() types.PluginInfo {
	return resmux.GuardAbout(func() types.PluginInfo {
		return resmux.Info("units", "0.1.0", "Unit conversions as resources (Go)")
	})
}

func Init(config []witTypes.Tuple2[string, string]) witTypes.Result[witTypes.Unit, types.Error] {
	return resmux.Guard(func() (witTypes.Unit, error) {
		return witTypes.Unit{}, resmux.NewConfig(config).Finish()
	})
}

func List(cursor witTypes.Option[string]) witTypes.Result[types.ResourcePage, types.Error] {
	return resmux.Guard(func() (types.ResourcePage, error) {
		if err := resmux.NoCursor(cursor); err != nil {
			return types.ResourcePage{}, err
		}
		resources := make([]types.Resource, 0, len(units))
		for _, u := range units {
			resources = append(resources, resmux.Resource("units/"+u.name, u.name,
				resmux.Description("a unit of "+u.dimension), resmux.MimeType("text/plain")))
		}
		page := resmux.ResourcePage(resources, witTypes.None[string]())
		page.Cache = day
		return page, nil
	})
}

func Templates(cursor witTypes.Option[string]) witTypes.Result[types.TemplatePage, types.Error] {
	return resmux.Guard(func() (types.TemplatePage, error) {
		if err := resmux.NoCursor(cursor); err != nil {
			return types.TemplatePage{}, err
		}
		convert := resmux.Template("convert/{value}/{from}/{to}", "convert",
			resmux.Description("A number converted between two units of one dimension"), resmux.MimeType("text/plain"))
		page := resmux.TemplatePage([]types.Template{convert}, witTypes.None[string]())
		page.Cache = day
		return page, nil
	})
}

func text(path, body string) types.ReadResult {
	result := resmux.ReadResult(resmux.Text(path, "text/plain", body))
	result.Cache = day
	return result
}

func Read(path string) witTypes.Result[types.ReadResult, types.Error] {
	return resmux.Guard(func() (types.ReadResult, error) {
		parts := strings.Split(path, "/")
		switch {
		case len(parts) == 2 && parts[0] == "units":
			u, ok := find(parts[1])
			if !ok {
				return types.ReadResult{}, resmux.NotFound("there is no unit %q", parts[1])
			}
			return text(path, fmt.Sprintf("%s: a unit of %s", u.name, u.dimension)), nil
		case len(parts) == 4 && parts[0] == "convert":
			value, err := strconv.ParseFloat(parts[1], 64)
			if err != nil {
				return types.ReadResult{}, resmux.NotFound("%q is not a number", parts[1])
			}
			from, okFrom := find(parts[2])
			to, okTo := find(parts[3])
			if !okFrom || !okTo {
				return types.ReadResult{}, resmux.NotFound("unknown unit in %q", path)
			}
			if from.dimension != to.dimension {
				return types.ReadResult{}, resmux.NotFound("%s is %s and %s is %s", from.name, from.dimension, to.name, to.dimension)
			}
			base := value*from.factor + from.offset
			return text(path, strconv.FormatFloat((base-to.offset)/to.factor, 'g', 12, 64)), nil
		}
		return types.ReadResult{}, resmux.NotFound("%q is neither units/NAME nor convert/VALUE/FROM/TO", path)
	})
}

func Complete(request types.CompletionRequest) witTypes.Result[types.Completion, types.Error] {
	return resmux.Guard(func() (types.Completion, error) {
		if request.PathTemplate != "convert/{value}/{from}/{to}" || (request.Argument != "from" && request.Argument != "to") {
			return types.Completion{}, resmux.InvalidInput("cannot complete %q", request.Argument)
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
		return resmux.Completion(values), nil
	})
}

func Changes(since witTypes.Option[string]) witTypes.Result[types.ChangeReport, types.Error] {
	return resmux.Guard(func() (types.ChangeReport, error) {
		return resmux.Unchanged("static"), nil
	})
}
