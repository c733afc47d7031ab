//! Content types by file extension; text types carry `charset=utf-8`.

/// The content type for a file name; `application/octet-stream` when the
/// extension is not in the table.
pub(crate) fn for_name(name: &str) -> &'static str {
    let ext = match name.rsplit_once('.') {
        Some((_, ext)) => ext.to_ascii_lowercase(),
        None => return DEFAULT,
    };
    TABLE.iter().find(|(e, _)| *e == ext).map_or(DEFAULT, |(_, t)| t)
}

const DEFAULT: &str = "application/octet-stream";

const TABLE: &[(&str, &str)] = &[
    ("html", "text/html; charset=utf-8"),
    ("htm", "text/html; charset=utf-8"),
    ("css", "text/css; charset=utf-8"),
    ("js", "text/javascript; charset=utf-8"),
    ("mjs", "text/javascript; charset=utf-8"),
    ("json", "application/json; charset=utf-8"),
    ("map", "application/json; charset=utf-8"),
    ("webmanifest", "application/manifest+json; charset=utf-8"),
    ("txt", "text/plain; charset=utf-8"),
    ("md", "text/markdown; charset=utf-8"),
    ("csv", "text/csv; charset=utf-8"),
    ("xml", "application/xml; charset=utf-8"),
    ("rss", "application/rss+xml; charset=utf-8"),
    ("atom", "application/atom+xml; charset=utf-8"),
    ("svg", "image/svg+xml; charset=utf-8"),
    ("png", "image/png"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("gif", "image/gif"),
    ("webp", "image/webp"),
    ("avif", "image/avif"),
    ("ico", "image/vnd.microsoft.icon"),
    ("bmp", "image/bmp"),
    ("woff", "font/woff"),
    ("woff2", "font/woff2"),
    ("ttf", "font/ttf"),
    ("otf", "font/otf"),
    ("eot", "application/vnd.ms-fontobject"),
    ("wasm", "application/wasm"),
    ("pdf", "application/pdf"),
    ("zip", "application/zip"),
    ("gz", "application/gzip"),
    ("br", "application/octet-stream"),
    ("zst", "application/zstd"),
    ("tar", "application/x-tar"),
    ("mp4", "video/mp4"),
    ("webm", "video/webm"),
    ("ogv", "video/ogg"),
    ("mp3", "audio/mpeg"),
    ("ogg", "audio/ogg"),
    ("oga", "audio/ogg"),
    ("wav", "audio/wav"),
    ("flac", "audio/flac"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_unknown_and_case() {
        assert_eq!(for_name("app.css"), "text/css; charset=utf-8");
        assert_eq!(for_name("APP.JS"), "text/javascript; charset=utf-8");
        assert_eq!(for_name("logo.png"), "image/png");
        assert_eq!(for_name("data.bin"), "application/octet-stream");
        assert_eq!(for_name("README"), "application/octet-stream");
    }
}
