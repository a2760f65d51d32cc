// `{{name}}`: a resmux plugin in C. It greets: `hello` reads "<greeting>,
// world!" and `hello/{who}` reads "<greeting>, <who>!", with the greeting
// taken from the manifest's [config]. Each exports_... function is one of the
// contract's; resmux.h builds the answers. Replace it with your own.

#include <stdlib.h>
#include <string.h>

#include "resmux.h"

#define PAGE_SIZE 100

static const char *const paths[] = {"hello"};
static const char *const names[] = {"ada", "alan", "grace", "linus"};

// What init read from the config: resmux calls init on every instance
// before any other call.
static char *greeting;

void exports_resmux_provider_provider_about(resmux_plugin_info_t *ret) {
    resmux_plugin_info(ret, "{{name}}", "0.1.0", "Says hello to the world, or to anyone");
}

bool exports_resmux_provider_provider_init(resmux_config_t *config, resmux_error_t *err) {
    greeting = resmux_config_text(config, "greeting", "Hello");
    return resmux_config_finish(config, err);
}

bool exports_resmux_provider_provider_list(plugin_string_t *cursor, resmux_resource_page_t *ret, resmux_error_t *err) {
    size_t start, end;
    plugin_option_string_t next;
    if (!resmux_paginate(cursor, sizeof paths / sizeof *paths, PAGE_SIZE, &start, &end, &next, err)) return false;
    resmux_resource_t *resources = resmux_resource_page(ret, end - start);
    ret->next_cursor = next;
    for (size_t i = start; i < end; i++) resmux_resource(&resources[i - start], paths[i], paths[i], "text/plain");
    return true;
}

bool exports_resmux_provider_provider_templates(plugin_string_t *cursor, resmux_template_page_t *ret,
                                                resmux_error_t *err) {
    if (!resmux_no_cursor(cursor, err)) return false;
    resmux_template(resmux_template_page(ret, 1), "hello/{who}", "greeting", "text/plain");
    return true;
}

// The text at `path`, or NULL when it names nothing; free it when done.
static char *greet(const char *path) {
    if (strcmp(path, "hello") == 0) return resmux_format("%s, world!", greeting);
    if (strncmp(path, "hello/", 6) != 0) return NULL;
    const char *who = path + 6;
    if (*who == '\0' || strchr(who, '/') != NULL) return NULL;
    return resmux_format("%s, %s!", greeting, who);
}

bool exports_resmux_provider_provider_read(plugin_string_t *path, resmux_read_result_t *ret, resmux_error_t *err) {
    char *wanted = resmux_cstring(path);
    char *text = greet(wanted);
    bool found = text != NULL;
    if (found) {
        resmux_text(resmux_read_result(ret, 1), wanted, "text/plain", text);
    } else {
        resmux_fail(err, RESMUX_NOT_FOUND, "no resource at \"%s\"", wanted);
    }
    free(text);
    free(wanted);
    return found;
}

bool exports_resmux_provider_provider_complete(resmux_completion_request_t *request, resmux_completion_t *ret,
                                               resmux_error_t *err) {
    if (!resmux_equals(&request->path_template, "hello/{who}") || !resmux_equals(&request->argument, "who")) {
        return resmux_fail(err, RESMUX_INVALID_INPUT, "\"%.*s\" has no completion for \"%.*s\"",
                           RESMUX_STR(request->path_template), RESMUX_STR(request->argument));
    }
    resmux_completion(ret);
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        if (resmux_has_prefix(names[i], &request->value)) resmux_offer(ret, names[i]);
    }
    return true;
}

bool exports_resmux_provider_provider_changes(plugin_string_t *since, resmux_change_report_t *ret, resmux_error_t *err) {
    resmux_change_report(ret, "0");
    return true;
}
