// `kv`: the keys of one key/value file (`key = value` per line, `#` for
// comments), granted to the plugin as a single file. The C example, built
// with clang for wasm32-wasi, the bindings `resmux bindings c` writes and
// the C SDK (sdk/c/resmux.h).
//
// Each key is a resource `keys/KEY` whose text is its value; the template
// `keys/{key}` completes keys by prefix; the change report follows the
// file's modification time and size.

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "resmux.h"

#define MAX_LINE 4096
#define PAGE_SIZE 100

static char *store_path = NULL;

typedef struct {
    char *key;
    char *value;
} entry_t;

static entry_t *entries = NULL;
static size_t entry_count = 0;

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
// that are not URI-safe. An instance may serve many calls, so what an
// earlier call loaded goes first.
static bool load(resmux_error_t *err) {
    for (size_t i = 0; i < entry_count; i++) {
        free(entries[i].key);
        free(entries[i].value);
    }
    entry_count = 0;
    FILE *file = fopen(store_path, "r");
    if (file == NULL) {
        return resmux_fail(err, RESMUX_UNAVAILABLE, "cannot open the store: %s", strerror(errno));
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

void exports_resmux_provider_provider_about(resmux_plugin_info_t *ret) {
    resmux_plugin_info(ret, "kv", "0.1.0", "The keys of a key/value file (C)");
}

bool exports_resmux_provider_provider_init(resmux_config_t *config, resmux_error_t *err) {
    store_path = resmux_config_text(config, "store", NULL);
    if (!resmux_config_finish(config, err)) return false;
    if (store_path == NULL) return resmux_fail(err, RESMUX_INVALID_INPUT, "config key \"store\" is required");
    return true;
}

bool exports_resmux_provider_provider_list(plugin_string_t *maybe_cursor, resmux_resource_page_t *ret,
                                           resmux_error_t *err) {
    size_t start, end;
    plugin_option_string_t next;
    if (!load(err) || !resmux_paginate(maybe_cursor, entry_count, PAGE_SIZE, &start, &end, &next, err)) return false;
    resmux_resource_t *resources = resmux_resource_page(ret, end - start);
    ret->next_cursor = next;
    for (size_t i = start; i < end; i++) {
        resmux_resource_t *resource = &resources[i - start];
        char path[MAX_LINE + 8];
        snprintf(path, sizeof path, "keys/%s", entries[i].key);
        resmux_resource(resource, path, entries[i].key, "text/plain");
        resource->size.is_some = true;
        resource->size.val = strlen(entries[i].value);
    }
    return true;
}

bool exports_resmux_provider_provider_templates(plugin_string_t *maybe_cursor, resmux_template_page_t *ret,
                                                resmux_error_t *err) {
    if (!resmux_no_cursor(maybe_cursor, err)) return false;
    resmux_template_t *key = resmux_template_page(ret, 1);
    resmux_template(key, "keys/{key}", "key", NULL);
    resmux_some(&key->description, "The value of one key");
    return true;
}

static bool read_key(const char *path, resmux_read_result_t *ret, resmux_error_t *err) {
    if (strncmp(path, "keys/", 5) != 0) return resmux_fail(err, RESMUX_NOT_FOUND, "\"%s\" is not keys/KEY", path);
    if (!load(err)) return false;
    const entry_t *entry = find(path + 5);
    if (entry == NULL) return resmux_fail(err, RESMUX_NOT_FOUND, "there is no key \"%s\"", path + 5);
    resmux_text(resmux_read_result(ret, 1), path, "text/plain", entry->value);
    return true;
}

bool exports_resmux_provider_provider_read(plugin_string_t *path, resmux_read_result_t *ret, resmux_error_t *err) {
    char *wanted = resmux_cstring(path);
    bool found = read_key(wanted, ret, err);
    free(wanted);
    return found;
}

bool exports_resmux_provider_provider_complete(resmux_completion_request_t *request, resmux_completion_t *ret,
                                               resmux_error_t *err) {
    if (!resmux_equals(&request->argument, "key")) {
        return resmux_fail(err, RESMUX_INVALID_INPUT, "cannot complete \"%.*s\"", RESMUX_STR(request->argument));
    }
    if (!load(err)) return false;
    resmux_completion(ret);
    for (size_t i = 0; i < entry_count; i++) {
        if (resmux_has_prefix(entries[i].key, &request->value)) resmux_offer(ret, entries[i].key);
    }
    return true;
}

bool exports_resmux_provider_provider_changes(plugin_string_t *maybe_since, resmux_change_report_t *ret,
                                              resmux_error_t *err) {
    struct stat status;
    if (stat(store_path, &status) != 0) {
        return resmux_fail(err, RESMUX_UNAVAILABLE, "cannot stat the store: %s", strerror(errno));
    }
    char token[64];
    snprintf(token, sizeof token, "%lld.%09ld-%lld", (long long)status.st_mtim.tv_sec, status.st_mtim.tv_nsec,
             (long long)status.st_size);
    resmux_change_report(ret, token);
    bool changed = maybe_since != NULL && !resmux_equals(maybe_since, token);
    if (!changed) return true;
    if (!load(err)) return false;
    ret->listing_changed = true;
    for (size_t i = 0; i < entry_count; i++) {
        char path[MAX_LINE + 8];
        snprintf(path, sizeof path, "keys/%s", entries[i].key);
        resmux_push(&ret->changed_paths, path);
    }
    return true;
}
