// node_helloworld: the helloworld of the suite in Node.js (Lambda's handler
// shape: an async function of the event and the context); no actual work,
// the reference for the Node runtime's platform overheads.
exports.handler = async (event, context) => {
  const name = (event && event.name) || 'World';
  return { message: `Hello, ${name}!`, length: [...name].length, function: context.functionName };
};
