// Finds where a long message can be cut into pieces (markdown.js's
// ``sections``), away from the page's main thread.

import {sections} from "./markdown.js";

self.onmessage = ({data}) => {
  self.postMessage({id: data.id, pieces: sections(data.text, data.size)});
};
