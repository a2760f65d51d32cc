// resmux.h: the C SDK of a resmux plugin, helpers over the generated
// bindings (plugin.h, from `resmux bindings c DIR`): short names for the
// contract's types, answers built with every optional field empty, errors
// set with a formatted message, the operator's config read key by key, and
// pagination. Header-only: include it instead of plugin.h.
//
// The bindings hand every export an uninitialised answer and free every
// string and list of it after the call: build answers with these helpers
// (they start from zero) and give them only heap strings (plugin_string_dup,
// resmux_some, or the helpers' own copies).
#ifndef RESMUX_H
#define RESMUX_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin.h"

typedef resmux_provider_types_error_t resmux_error_t;
typedef resmux_provider_types_plugin_info_t resmux_plugin_info_t;
typedef plugin_list_tuple2_string_string_t resmux_config_t;
typedef resmux_provider_types_resource_t resmux_resource_t;
typedef resmux_provider_types_resource_page_t resmux_resource_page_t;
typedef resmux_provider_types_template_t resmux_template_t;
typedef resmux_provider_types_template_page_t resmux_template_page_t;
typedef resmux_provider_types_content_t resmux_content_t;
typedef resmux_provider_types_read_result_t resmux_read_result_t;
typedef resmux_provider_types_option_cache_hint_t resmux_cache_t;
typedef resmux_provider_types_completion_request_t resmux_completion_request_t;
typedef resmux_provider_types_completion_t resmux_completion_t;
typedef resmux_provider_types_change_report_t resmux_change_report_t;

#define RESMUX_NOT_FOUND RESMUX_PROVIDER_TYPES_ERROR_NOT_FOUND
#define RESMUX_INVALID_INPUT RESMUX_PROVIDER_TYPES_ERROR_INVALID_INPUT
#define RESMUX_DENIED RESMUX_PROVIDER_TYPES_ERROR_DENIED
#define RESMUX_UNAVAILABLE RESMUX_PROVIDER_TYPES_ERROR_UNAVAILABLE
#define RESMUX_INTERNAL RESMUX_PROVIDER_TYPES_ERROR_INTERNAL
#define RESMUX_PUBLIC RESMUX_PROVIDER_TYPES_CACHE_SCOPE_PUBLIC
#define RESMUX_PRIVATE RESMUX_PROVIDER_TYPES_CACHE_SCOPE_PRIVATE

// The two printf arguments of "%.*s" for a bindings string.
#define RESMUX_STR(text) (int)(text).len, (const char *)(text).ptr

// Strings.

// resmux_format over a va_list.
static inline char *resmux_vformat(const char *format, va_list arguments) {
    va_list measured;
    va_copy(measured, arguments);
    int length = vsnprintf(NULL, 0, format, measured);
    va_end(measured);
    size_t size = length > 0 ? (size_t)length + 1 : 1;
    char *text = malloc(size);
    vsnprintf(text, size, format, arguments);
    return text;
}

// A formatted C string, like sprintf into a buffer just large enough; free
// it when done.
__attribute__((format(printf, 1, 2))) static inline char *resmux_format(const char *format, ...) {
    va_list arguments;
    va_start(arguments, format);
    char *text = resmux_vformat(format, arguments);
    va_end(arguments);
    return text;
}

// Sets an optional string to a copy of `text`.
static inline void resmux_some(plugin_option_string_t *out, const char *text) {
    out->is_some = true;
    plugin_string_dup(&out->val, text);
}

// A NUL-terminated copy of a bindings string, for the C string functions;
// free it when done.
static inline char *resmux_cstring(const plugin_string_t *text) {
    char *copy = malloc(text->len + 1);
    memcpy(copy, text->ptr, text->len);
    copy[text->len] = '\0';
    return copy;
}

// Whether a bindings string is `text`.
static inline bool resmux_equals(const plugin_string_t *string, const char *text) {
    return string->len == strlen(text) && memcmp(string->ptr, text, string->len) == 0;
}

// Whether C string `text` starts with the bindings string `prefix`.
static inline bool resmux_has_prefix(const char *text, const plugin_string_t *prefix) {
    return strlen(text) >= prefix->len && memcmp(text, prefix->ptr, prefix->len) == 0;
}

// Appends a copy of `text` to a list of strings.
static inline void resmux_push(plugin_list_string_t *list, const char *text) {
    list->ptr = realloc(list->ptr, (list->len + 1) * sizeof *list->ptr);
    plugin_string_dup(&list->ptr[list->len++], text);
}

// Errors: `return resmux_fail(err, RESMUX_NOT_FOUND, "no \"%s\"", key);`

// Sets `err` to the case `tag` with a formatted message; returns false, what
// an export returns on failure.
__attribute__((format(printf, 3, 4))) static inline bool resmux_fail(resmux_error_t *err, uint8_t tag,
                                                                      const char *format, ...) {
    va_list arguments;
    va_start(arguments, format);
    char *message = resmux_vformat(format, arguments);
    va_end(arguments);
    err->tag = tag;
    // Every case carries its message at the same place; the bindings free it.
    err->val.not_found = (plugin_string_t){(uint8_t *)message, strlen(message)};
    return false;
}

// Answers, each started from zero: every optional field empty.

static inline void resmux_plugin_info(resmux_plugin_info_t *info, const char *name, const char *version,
                                      const char *description) {
    plugin_string_dup(&info->name, name);
    plugin_string_dup(&info->version, version);
    plugin_string_dup(&info->description, description);
}

// Zeroes `answer` and gives its `list` `count` zeroed items; evaluates to
// the first of them.
#define RESMUX_START_LIST(answer, list, count)                                           \
    (memset((answer), 0, sizeof *(answer)), (answer)->list.len = (count),               \
     (answer)->list.ptr = calloc((count) ? (count) : 1, sizeof *(answer)->list.ptr))

// Starts a page of `count` resources, returned for resmux_resource to fill;
// set page->next_cursor and page->cache after it when there are any.
static inline resmux_resource_t *resmux_resource_page(resmux_resource_page_t *page, size_t count) {
    return RESMUX_START_LIST(page, resources, count);
}

// A resource at `path`; `mime_type` may be NULL.
static inline void resmux_resource(resmux_resource_t *resource, const char *path, const char *name,
                                   const char *mime_type) {
    memset(resource, 0, sizeof *resource);
    plugin_string_dup(&resource->path, path);
    plugin_string_dup(&resource->name, name);
    if (mime_type != NULL) resmux_some(&resource->mime_type, mime_type);
}

// Starts a page of `count` templates, like resmux_resource_page.
static inline resmux_template_t *resmux_template_page(resmux_template_page_t *page, size_t count) {
    return RESMUX_START_LIST(page, templates, count);
}

// A template such as `notes/{id}`; `mime_type` may be NULL.
static inline void resmux_template(resmux_template_t *template, const char *path_template, const char *name,
                                   const char *mime_type) {
    memset(template, 0, sizeof *template);
    plugin_string_dup(&template->path_template, path_template);
    plugin_string_dup(&template->name, name);
    if (mime_type != NULL) resmux_some(&template->mime_type, mime_type);
}

// Starts a read of `count` contents (usually 1), returned for resmux_text or
// resmux_blob to fill.
static inline resmux_content_t *resmux_read_result(resmux_read_result_t *result, size_t count) {
    return RESMUX_START_LIST(result, contents, count);
}

static inline void resmux_text(resmux_content_t *content, const char *path, const char *mime_type,
                               const char *text) {
    memset(content, 0, sizeof *content);
    plugin_string_dup(&content->path, path);
    resmux_some(&content->mime_type, mime_type);
    content->body.tag = RESMUX_PROVIDER_TYPES_BODY_TEXT;
    plugin_string_dup(&content->body.val.text, text);
}

static inline void resmux_blob(resmux_content_t *content, const char *path, const char *mime_type,
                               const uint8_t *bytes, size_t len) {
    memset(content, 0, sizeof *content);
    plugin_string_dup(&content->path, path);
    resmux_some(&content->mime_type, mime_type);
    content->body.tag = RESMUX_PROVIDER_TYPES_BODY_BLOB;
    content->body.val.blob.len = len;
    content->body.val.blob.ptr = malloc(len ? len : 1);
    memcpy(content->body.val.blob.ptr, bytes, len);
}

// Sets the cache hint of a page or a read: fresh for `ttl_ms`, shared as
// `scope` (RESMUX_PUBLIC or RESMUX_PRIVATE).
static inline void resmux_cache(resmux_cache_t *cache, uint64_t ttl_ms, uint8_t scope) {
    cache->is_some = true;
    cache->val.ttl_ms = ttl_ms;
    cache->val.scope = scope;
}

// Starts a completion with no values yet.
static inline void resmux_completion(resmux_completion_t *completion) {
    memset(completion, 0, sizeof *completion);
    completion->total.is_some = true;
}

// Offers one more value, counted in the total.
static inline void resmux_offer(resmux_completion_t *completion, const char *value) {
    resmux_push(&completion->values, value);
    completion->total.val = completion->values.len;
}

// Starts a change report of the state `token`, nothing changed yet (push
// to report->changed_paths, set report->listing_changed).
static inline void resmux_change_report(resmux_change_report_t *report, const char *token) {
    memset(report, 0, sizeof *report);
    plugin_string_dup(&report->token, token);
}

// Config: take each key once, then resmux_config_finish refuses any left.

// Takes `key` out of the config: a copy of its value (free it when done), or
// NULL when it is not given.
static inline char *resmux_config_take(resmux_config_t *config, const char *key) {
    for (size_t i = 0; i < config->len; i++) {
        if (resmux_equals(&config->ptr[i].f0, key)) {
            char *value = resmux_cstring(&config->ptr[i].f1);
            memmove(&config->ptr[i], &config->ptr[i + 1], (config->len - i - 1) * sizeof *config->ptr);
            config->len--;
            return value;
        }
    }
    return NULL;
}

// Takes `key` as text, or a copy of `fallback` when it is not given (NULL
// when `fallback` is NULL, for a key without a default).
static inline char *resmux_config_text(resmux_config_t *config, const char *key, const char *fallback) {
    char *value = resmux_config_take(config, key);
    return value == NULL && fallback != NULL ? strdup(fallback) : value;
}

// Takes `key` as a whole number into `*out`, or `fallback` when it is not given.
static inline bool resmux_config_int(resmux_config_t *config, const char *key, long long fallback, long long *out,
                                     resmux_error_t *err) {
    char *text = resmux_config_take(config, key);
    *out = fallback;
    if (text == NULL) return true;
    char *end;
    *out = strtoll(text, &end, 10);
    bool valid = *text != '\0' && *end == '\0';
    if (!valid) {
        resmux_fail(err, RESMUX_INVALID_INPUT, "config key \"%s\" has the value \"%s\", which is not a valid integer",
                    key, text);
    }
    free(text);
    return valid;
}

// Takes `key` as true or false into `*out`, or `fallback` when it is not given.
static inline bool resmux_config_bool(resmux_config_t *config, const char *key, bool fallback, bool *out,
                                      resmux_error_t *err) {
    char *text = resmux_config_take(config, key);
    *out = fallback;
    if (text == NULL) return true;
    *out = strcmp(text, "true") == 0;
    bool valid = *out || strcmp(text, "false") == 0;
    if (!valid) {
        resmux_fail(err, RESMUX_INVALID_INPUT,
                    "config key \"%s\" has the value \"%s\", which is not a valid bool (true or false)", key, text);
    }
    free(text);
    return valid;
}

// Refuses any key not taken yet.
static inline bool resmux_config_finish(const resmux_config_t *config, resmux_error_t *err) {
    if (config->len == 0) return true;
    return resmux_fail(err, RESMUX_INVALID_INPUT, "unknown config key \"%.*s\"", RESMUX_STR(config->ptr[0].f0));
}

// Pagination.

// Refuses a cursor where a listing has only one page.
static inline bool resmux_no_cursor(const plugin_string_t *cursor, resmux_error_t *err) {
    if (cursor == NULL) return true;
    return resmux_fail(err, RESMUX_INVALID_INPUT, "unknown cursor \"%.*s\"", RESMUX_STR(*cursor));
}

// The page of `total` items that `cursor` (an offset this function handed
// out, or NULL) points at: items [*start, *end), at most `page_size`, and
// in `*next` the cursor of the next page (none on the last).
static inline bool resmux_paginate(const plugin_string_t *cursor, size_t total, size_t page_size, size_t *start,
                                   size_t *end, plugin_option_string_t *next, resmux_error_t *err) {
    *start = 0;
    if (cursor != NULL) {
        char *text = resmux_cstring(cursor);
        char *rest;
        unsigned long long offset = strtoull(text, &rest, 10);
        bool valid = *text >= '0' && *text <= '9' && *rest == '\0' && offset <= total;
        free(text);
        if (!valid) return resmux_fail(err, RESMUX_INVALID_INPUT, "unknown cursor \"%.*s\"", RESMUX_STR(*cursor));
        *start = offset;
    }
    size_t size = page_size ? page_size : 1;
    *end = total - *start > size ? *start + size : total;
    memset(next, 0, sizeof *next);
    if (*end < total) {
        char *offset = resmux_format("%zu", *end);
        resmux_some(next, offset);
        free(offset);
    }
    return true;
}

#endif
