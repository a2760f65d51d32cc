// Package resmux is the Go SDK of a resmux plugin: constructors for the
// contract's records with every optional field left empty, errors that map to
// the contract's error variant, guards that turn a panic into an answer, the
// operator's config read key by key, and pagination.
//
// It lives inside the bindings module (`wit_component`) beside the author's
// package `export_resmux_provider_provider`, whose exported functions wrap
// their bodies in Guard (GuardAbout for About):
//
//	func Read(path string) witTypes.Result[types.ReadResult, types.Error] {
//		return resmux.Guard(func() (types.ReadResult, error) {
//			if path != "greeting" {
//				return types.ReadResult{}, resmux.NotFound("no %q", path)
//			}
//			return resmux.ReadResult(resmux.Text(path, "text/plain", "Hello!")), nil
//		})
//	}
package resmux

import (
	"errors"
	"fmt"
	"iter"
	"os"
	"runtime/debug"
	"sort"
	"strconv"
	"time"

	types "wit_component/resmux_provider_types"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
)

// Error is a failure the host receives as one case of the contract's error.
type Error struct {
	kind    func(string) types.Error
	message string
}

func (err *Error) Error() string { return err.message }

func failure(kind func(string) types.Error, format string, arguments []any) error {
	return &Error{kind, fmt.Sprintf(format, arguments...)}
}

// NotFound: the path names nothing this plugin serves.
func NotFound(format string, arguments ...any) error {
	return failure(types.MakeErrorNotFound, format, arguments)
}

// InvalidInput: a malformed path, cursor, argument or config value.
func InvalidInput(format string, arguments ...any) error {
	return failure(types.MakeErrorInvalidInput, format, arguments)
}

// Denied: the plugin refuses on purpose.
func Denied(format string, arguments ...any) error {
	return failure(types.MakeErrorDenied, format, arguments)
}

// Unavailable: a dependency is down; a later retry may succeed.
func Unavailable(format string, arguments ...any) error {
	return failure(types.MakeErrorUnavailable, format, arguments)
}

// Internal: a bug or an unexpected state.
func Internal(format string, arguments ...any) error {
	return failure(types.MakeErrorInternal, format, arguments)
}

// contractError is the case of the first *Error that err wraps (internal
// when none), carrying err's whole message, context added by wrapping
// included.
func contractError(err error) types.Error {
	var typed *Error
	if errors.As(err, &typed) {
		return typed.kind(err.Error())
	}
	return types.MakeErrorInternal(err.Error())
}

// panicked writes the stack of a recovered panic to stderr (the host logs it)
// and returns the message the host gets.
func panicked(recovered any) string {
	message := fmt.Sprintf("panic: %v", recovered)
	fmt.Fprintf(os.Stderr, "%s\n%s", message, debug.Stack())
	return message
}

// Guard runs the body of an exported function: its error becomes the
// contract's error, and a panic becomes internal("panic: ...") instead of a
// trap, with the stack written to stderr.
func Guard[T any](body func() (T, error)) (result witTypes.Result[T, types.Error]) {
	defer func() {
		if recovered := recover(); recovered != nil {
			result = witTypes.Err[T](types.MakeErrorInternal(panicked(recovered)))
		}
	}()
	value, err := body()
	if err != nil {
		return witTypes.Err[T](contractError(err))
	}
	return witTypes.Ok[T, types.Error](value)
}

// GuardAbout runs the body of About, which has no error to answer with: a
// panic becomes a plugin info that names it.
func GuardAbout(body func() types.PluginInfo) (info types.PluginInfo) {
	defer func() {
		if recovered := recover(); recovered != nil {
			info = Info("unknown", "0.0.0", "about failed: "+panicked(recovered))
		}
	}()
	return body()
}

// Info is what About returns.
func Info(name, version, description string) types.PluginInfo {
	return types.PluginInfo{Name: name, Version: version, Description: description}
}

// Detail sets an optional field of a Resource or a Template.
type Detail func(*details)

type details struct {
	title, description, mimeType, meta witTypes.Option[string]
	size                               witTypes.Option[uint64]
}

// Title is a human-readable title.
func Title(title string) Detail {
	return func(d *details) { d.title = witTypes.Some(title) }
}

// Description says what the resource holds, for people and models.
func Description(description string) Detail {
	return func(d *details) { d.description = witTypes.Some(description) }
}

// MimeType is the MIME type of the contents, for example `text/markdown`.
func MimeType(mimeType string) Detail {
	return func(d *details) { d.mimeType = witTypes.Some(mimeType) }
}

// Meta is the text of a JSON object; it becomes MCP `_meta`.
func Meta(json string) Detail {
	return func(d *details) { d.meta = witTypes.Some(json) }
}

// Size is a resource's size in bytes; a template has none.
func Size(bytes uint64) Detail {
	return func(d *details) { d.size = witTypes.Some(bytes) }
}

func collect(options []Detail) details {
	var collected details
	for _, option := range options {
		option(&collected)
	}
	return collected
}

// Resource is a listed resource at path; annotations and icons stay empty
// (set the fields on the result for those).
func Resource(path, name string, options ...Detail) types.Resource {
	d := collect(options)
	return types.Resource{Path: path, Name: name, Title: d.title, Description: d.description,
		MimeType: d.mimeType, Size: d.size, Meta: d.meta}
}

// Template is a listed RFC 6570 template such as `notes/{id}`.
func Template(pathTemplate, name string, options ...Detail) types.Template {
	d := collect(options)
	return types.Template{PathTemplate: pathTemplate, Name: name, Title: d.title, Description: d.description,
		MimeType: d.mimeType, Meta: d.meta}
}

// Text is a content item of text.
func Text(path, mimeType, text string) types.Content {
	return types.Content{Path: path, MimeType: witTypes.Some(mimeType), Body: types.MakeBodyText(text)}
}

// Blob is a content item of bytes.
func Blob(path, mimeType string, bytes []byte) types.Content {
	return types.Content{Path: path, MimeType: witTypes.Some(mimeType), Body: types.MakeBodyBlob(bytes)}
}

// ReadResult is a read of one content item (or more: a directory's
// entries), without a cache hint (set Cache on the result for one).
func ReadResult(contents ...types.Content) types.ReadResult {
	return types.ReadResult{Contents: contents}
}

// ResourcePage is a page of resources and the cursor of the next one (none
// on the last page).
func ResourcePage(resources []types.Resource, next witTypes.Option[string]) types.ResourcePage {
	return types.ResourcePage{Resources: resources, NextCursor: next}
}

// TemplatePage is a page of templates and the cursor of the next one.
func TemplatePage(templates []types.Template, next witTypes.Option[string]) types.TemplatePage {
	return types.TemplatePage{Templates: templates, NextCursor: next}
}

// Cache is a cache hint, ready for the Cache field of a page or a read.
func Cache(ttl time.Duration, scope types.CacheScope) witTypes.Option[types.CacheHint] {
	return witTypes.Some(types.CacheHint{TtlMs: uint64(ttl.Milliseconds()), Scope: scope})
}

// Completion offers values, all there are.
func Completion(values []string) types.Completion {
	return types.Completion{Values: values, Total: witTypes.Some(uint32(len(values)))}
}

// Unchanged reports the state named token, with nothing changed.
func Unchanged(token string) types.ChangeReport {
	return types.ChangeReport{Token: token}
}

// NoTemplates is the Templates of a plugin without templates.
func NoTemplates(cursor witTypes.Option[string]) witTypes.Result[types.TemplatePage, types.Error] {
	return Guard(func() (types.TemplatePage, error) {
		return types.TemplatePage{}, NoCursor(cursor)
	})
}

// NoCompletion is the Complete of a plugin that completes nothing.
func NoCompletion(request types.CompletionRequest) witTypes.Result[types.Completion, types.Error] {
	return witTypes.Err[types.Completion](types.MakeErrorInvalidInput(
		fmt.Sprintf("%q has no completion for %q", request.PathTemplate, request.Argument)))
}

// NoChanges is the Changes of a plugin that cannot tell what changed.
func NoChanges(since witTypes.Option[string]) witTypes.Result[types.ChangeReport, types.Error] {
	return witTypes.Err[types.ChangeReport](types.MakeErrorUnavailable("this plugin reports no changes"))
}

// Config is the operator's [config], taken key by key so that Finish can
// refuse any key left over: a typo in a manifest never goes unnoticed.
type Config struct {
	values map[string]string
}

// NewConfig reads the pairs Init receives.
func NewConfig(pairs []witTypes.Tuple2[string, string]) *Config {
	values := make(map[string]string, len(pairs))
	for _, pair := range pairs {
		values[pair.F0] = pair.F1
	}
	return &Config{values}
}

func (config *Config) take(key string) (string, bool) {
	text, given := config.values[key]
	delete(config.values, key)
	return text, given
}

// Text takes key as text, or fallback when it is not given.
func (config *Config) Text(key, fallback string) string {
	if text, given := config.take(key); given {
		return text
	}
	return fallback
}

// Int takes key as a whole number, or fallback when it is not given.
func (config *Config) Int(key string, fallback int) (int, error) {
	text, given := config.take(key)
	if !given {
		return fallback, nil
	}
	number, err := strconv.Atoi(text)
	if err != nil {
		return 0, InvalidInput("config key %q has the value %q, which is not a valid integer", key, text)
	}
	return number, nil
}

// Bool takes key as true or false, or fallback when it is not given.
func (config *Config) Bool(key string, fallback bool) (bool, error) {
	text, given := config.take(key)
	if !given {
		return fallback, nil
	}
	switch text {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, InvalidInput("config key %q has the value %q, which is not a valid bool (true or false)", key, text)
}

// Finish refuses any key not taken yet.
func (config *Config) Finish() error {
	left := make([]string, 0, len(config.values))
	for key := range config.values {
		left = append(left, key)
	}
	if len(left) == 0 {
		return nil
	}
	sort.Strings(left)
	return InvalidInput("unknown config key %q", left[0])
}

// NoCursor refuses a cursor where a listing has only one page.
func NoCursor(cursor witTypes.Option[string]) error {
	if cursor.IsSome() {
		return InvalidInput("unknown cursor %q", cursor.Some())
	}
	return nil
}

// Paginate is the page of items that cursor (an offset it handed out) points
// at, pageSize long, and the cursor of the next page.
func Paginate[T any](items []T, cursor witTypes.Option[string], pageSize int) ([]T, witTypes.Option[string], error) {
	start := 0
	if cursor.IsSome() {
		offset, err := strconv.Atoi(cursor.Some())
		if err != nil || offset < 0 || offset > len(items) {
			return nil, witTypes.None[string](), InvalidInput("unknown cursor %q", cursor.Some())
		}
		start = offset
	}
	end := min(start+max(pageSize, 1), len(items))
	if end < len(items) {
		return items[start:end], witTypes.Some(strconv.Itoa(end)), nil
	}
	return items[start:end], witTypes.None[string](), nil
}

// PageAfter is the page of entries (yielded in ascending order of key) that
// comes after cursor (a key it handed out), pageSize long, and the cursor of
// the next page: the last key sent, so pages stay right when entries come
// and go. It stops the sequence one entry past the page, so a plugin that
// yields its entries in order does a page's worth of work per page.
func PageAfter[T any](entries iter.Seq[T], key func(T) string, cursor witTypes.Option[string], pageSize int) ([]T, witTypes.Option[string]) {
	page := []T{}
	more := false
	for entry := range entries {
		if cursor.IsSome() && key(entry) <= cursor.Some() {
			continue
		}
		if len(page) == max(pageSize, 1) {
			more = true
			break
		}
		page = append(page, entry)
	}
	if more {
		return page, witTypes.Some(key(page[len(page)-1]))
	}
	return page, witTypes.None[string]()
}
