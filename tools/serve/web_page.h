// GET / of tessera serve: one self-contained page (HTML, CSS and JavaScript, no build step) that
// asks for an image with a prompt, a method and a seed, and shows it filling in as rounds are
// accepted (the streamed previews of POST /v1/images/generations with "stream": true), the
// acceptance heatmap beside it, and the stats when it is done.
#pragma once

namespace tessera::serve {

const char* web_page();

}  // namespace tessera::serve
