// TEST ONLY: a callback-style Node handler (three parameters): answers
// through the callback after a timer, or fails through it.
exports.handler = (event, context, callback) => {
  setTimeout(() => {
    if (event.fail) callback(new Error('callback failure'));
    else callback(null, { doubled: event.n * 2 });
  }, 5);
};
