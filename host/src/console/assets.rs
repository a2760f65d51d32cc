//! The console's page, style sheet and script, embedded in the binary so
//! that the console works air-gapped and needs no frontend toolchain to
//! build: plain HTML, CSS and JavaScript, served as they are written.

use axum::http::header;
use axum::response::{IntoResponse, Redirect};
use axum::routing::get;

const PAGE: &str = include_str!("assets/index.html");
const STYLE: &str = include_str!("assets/console.css");
const SCRIPT: &str = include_str!("assets/console.js");

pub fn routes() -> axum::Router {
    axum::Router::new()
        .route("/", get(|| async { Redirect::to("/console") }))
        .route("/console", get(|| asset("text/html; charset=utf-8", PAGE)))
        .route(
            "/console/console.css",
            get(|| asset("text/css; charset=utf-8", STYLE)),
        )
        .route(
            "/console/console.js",
            get(|| asset("text/javascript; charset=utf-8", SCRIPT)),
        )
}

async fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, content_type)], body)
}
