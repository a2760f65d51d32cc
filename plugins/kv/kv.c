// `kv`: the keys of one key/value file (`key = value` per line, `#` for
// comments), granted to the plugin as a single file. The C example, built
// with clang for wasm32-wasi and the bindings resmux-plugin-build writes.
//
// Each key is a resource `keys/KEY` whose text is its value; the template
// `keys/{key}` completes keys by prefix; the change report follows the
// file's modification time and size.

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "plugin.h"

typedef exports_resmux_provider_provider_error_t error_t;

#define MAX_LINE 4096
#define PAGE_SIZE 100

static char *store_path = NULL;

typedef struct {
    char *key;
    char *value;
} entry_t;

static entry_t *entries = NULL;
static size_t entry_count = 0;

// Sets `err` to the error `tag` with a formatted message; returns false so
// a function can `return fail(...)`.
static bool fail(error_t *err, uint8_t tag, const char *format, const char *detail) {
    char message[512];
    snprintf(message, sizeof message, format, detail);
    err->tag = tag;
    plugin_string_dup(&err->val.not_found, message);
    return false;
}

static char *copy_string(const plugin_string_t *text) {
    char *copy = malloc(text->len + 1);
    memcpy(copy, text->ptr, text->len);
    copy[text->len] = '\0';
    return copy;
}

static char *trim(char *text) {
    while (*text == ' ' || *text == '\t') text++;
    char *end = text + strlen(text);
    while (end > text && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\n' || end[-1] == '\r')) end--;
    *end = '\0';
    return text;
}

static bool valid_key(const char *key) {
    if (*key == '\0') return false;
    for (const char *c = key; *c; c++) {
        bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                  *c == '.' || *c == '_' || *c == '-' || *c == '~';
        if (!ok) return false;
    }
    return true;
}

// Reads the store into `entries`, skipping comments, blank lines and keys
// that are not URI-safe.
static bool load(error_t *err) {
    FILE *file = fopen(store_path, "r");
    if (file == NULL) {
        return fail(err, RESMUX_PROVIDER_TYPES_ERROR_UNAVAILABLE, "cannot open the store: %s", strerror(errno));
    }
    char line[MAX_LINE];
    size_t capacity = 0;
    while (fgets(line, sizeof line, file) != NULL) {
        char *text = trim(line);
        char *equals = strchr(text, '=');
        if (*text == '#' || *text == '\0' || equals == NULL) continue;
        *equals = '\0';
        char *key = trim(text);
        char *value = trim(equals + 1);
        if (!valid_key(key)) continue;
        if (entry_count == capacity) {
            capacity = capacity ? capacity * 2 : 16;
            entries = realloc(entries, capacity * sizeof *entries);
        }
        entries[entry_count].key = strdup(key);
        entries[entry_count].value = strdup(value);
        entry_count++;
    }
    fclose(file);
    return true;
}

static const entry_t *find(const char *key) {
    for (size_t i = 0; i < entry_count; i++) {
        if (strcmp(entries[i].key, key) == 0) return &entries[i];
    }
    return NULL;
}

void exports_resmux_provider_provider_about(resmux_provider_types_plugin_info_t *ret) {
    plugin_string_dup(&ret->name, "kv");
    plugin_string_dup(&ret->version, "0.1.0");
    plugin_string_dup(&ret->description, "The keys of a key/value file (C)");
}

bool exports_resmux_provider_provider_init(plugin_list_tuple2_string_string_t *config, error_t *err) {
    for (size_t i = 0; i < config->len; i++) {
        char *key = copy_string(&config->ptr[i].f0);
        if (strcmp(key, "store") != 0) {
            fail(err, RESMUX_PROVIDER_TYPES_ERROR_INVALID_INPUT, "unknown config key \"%s\"", key);
            free(key);
            return false;
        }
        free(key);
        store_path = copy_string(&config->ptr[i].f1);
    }
    if (store_path == NULL) {
        return fail(err, RESMUX_PROVIDER_TYPES_ERROR_INVALID_INPUT, "config key \"store\" is required%s", "");
    }
    return true;
}

bool exports_resmux_provider_provider_list(plugin_string_t *maybe_cursor, resmux_provider_types_resource_page_t *ret,
                                           error_t *err) {
    if (!load(err)) return false;
    size_t start = 0;
    if (maybe_cursor != NULL) {
        char *cursor = copy_string(maybe_cursor);
        char *end;
        start = strtoul(cursor, &end, 10);
        bool bad = *cursor == '\0' || *end != '\0' || start > entry_count;
        if (bad) fail(err, RESMUX_PROVIDER_TYPES_ERROR_INVALID_INPUT, "unknown cursor \"%s\"", cursor);
        free(cursor);
        if (bad) return false;
    }
    size_t end = start + PAGE_SIZE < entry_count ? start + PAGE_SIZE : entry_count;
    ret->resources.len = end - start;
    ret->resources.ptr = calloc(end - start + 1, sizeof *ret->resources.ptr);
    for (size_t i = start; i < end; i++) {
        resmux_provider_types_resource_t *resource = &ret->resources.ptr[i - start];
        char path[MAX_LINE + 8];
        snprintf(path, sizeof path, "keys/%s", entries[i].key);
        plugin_string_dup(&resource->path, path);
        plugin_string_dup(&resource->name, entries[i].key);
        resource->mime_type.is_some = true;
        plugin_string_dup(&resource->mime_type.val, "text/plain");
        resource->size.is_some = true;
        resource->size.val = strlen(entries[i].value);
    }
    ret->next_cursor.is_some = end < entry_count;
    if (ret->next_cursor.is_some) {
        char next[32];
        snprintf(next, sizeof next, "%zu", end);
        plugin_string_dup(&ret->next_cursor.val, next);
    }
    return true;
}

bool exports_resmux_provider_provider_templates(plugin_string_t *maybe_cursor, resmux_provider_types_template_page_t *ret,
                                                error_t *err) {
    if (maybe_cursor != NULL) {
        return fail(err, RESMUX_PROVIDER_TYPES_ERROR_INVALID_INPUT, "unknown cursor%s", "");
    }
    ret->templates.len = 1;
    ret->templates.ptr = calloc(1, sizeof *ret->templates.ptr);
    plugin_string_dup(&ret->templates.ptr[0].path_template, "keys/{key}");
    plugin_string_dup(&ret->templates.ptr[0].name, "key");
    ret->templates.ptr[0].description.is_some = true;
    plugin_string_dup(&ret->templates.ptr[0].description.val, "The value of one key");
    return true;
}

bool exports_resmux_provider_provider_read(plugin_string_t *path, resmux_provider_types_read_result_t *ret, error_t *err) {
    char *wanted = copy_string(path);
    if (strncmp(wanted, "keys/", 5) != 0) {
        fail(err, RESMUX_PROVIDER_TYPES_ERROR_NOT_FOUND, "\"%s\" is not keys/KEY", wanted);
        free(wanted);
        return false;
    }
    if (!load(err)) {
        free(wanted);
        return false;
    }
    const entry_t *entry = find(wanted + 5);
    if (entry == NULL) {
        fail(err, RESMUX_PROVIDER_TYPES_ERROR_NOT_FOUND, "there is no key \"%s\"", wanted + 5);
        free(wanted);
        return false;
    }
    ret->contents.len = 1;
    ret->contents.ptr = calloc(1, sizeof *ret->contents.ptr);
    resmux_provider_types_content_t *content = &ret->contents.ptr[0];
    plugin_string_dup(&content->path, wanted);
    content->mime_type.is_some = true;
    plugin_string_dup(&content->mime_type.val, "text/plain");
    content->body.tag = RESMUX_PROVIDER_TYPES_BODY_TEXT;
    plugin_string_dup(&content->body.val.text, entry->value);
    free(wanted);
    return true;
}

bool exports_resmux_provider_provider_complete(resmux_provider_types_completion_request_t *request,
                                               resmux_provider_types_completion_t *ret, error_t *err) {
    char *argument = copy_string(&request->argument);
    bool is_key = strcmp(argument, "key") == 0;
    if (!is_key) fail(err, RESMUX_PROVIDER_TYPES_ERROR_INVALID_INPUT, "cannot complete \"%s\"", argument);
    free(argument);
    if (!is_key || !load(err)) return false;
    char *prefix = copy_string(&request->value);
    ret->values.ptr = calloc(entry_count + 1, sizeof *ret->values.ptr);
    for (size_t i = 0; i < entry_count; i++) {
        if (strncmp(entries[i].key, prefix, strlen(prefix)) == 0) {
            plugin_string_dup(&ret->values.ptr[ret->values.len++], entries[i].key);
        }
    }
    free(prefix);
    ret->total.is_some = true;
    ret->total.val = ret->values.len;
    return true;
}

bool exports_resmux_provider_provider_changes(plugin_string_t *maybe_since, resmux_provider_types_change_report_t *ret,
                                              error_t *err) {
    struct stat status;
    if (stat(store_path, &status) != 0) {
        return fail(err, RESMUX_PROVIDER_TYPES_ERROR_UNAVAILABLE, "cannot stat the store: %s", strerror(errno));
    }
    char token[64];
    snprintf(token, sizeof token, "%lld.%09ld-%lld", (long long)status.st_mtim.tv_sec, status.st_mtim.tv_nsec,
             (long long)status.st_size);
    plugin_string_dup(&ret->token, token);
    bool changed = maybe_since != NULL &&
                   (maybe_since->len != strlen(token) || memcmp(maybe_since->ptr, token, maybe_since->len) != 0);
    if (!changed) return true;
    if (!load(err)) return false;
    ret->listing_changed = true;
    ret->changed_paths.ptr = calloc(entry_count + 1, sizeof *ret->changed_paths.ptr);
    for (size_t i = 0; i < entry_count; i++) {
        char path[MAX_LINE + 8];
        snprintf(path, sizeof path, "keys/%s", entries[i].key);
        plugin_string_dup(&ret->changed_paths.ptr[ret->changed_paths.len++], path);
    }
    return true;
}
