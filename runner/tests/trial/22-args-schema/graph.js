export const meta = {name: 'schema', slug: 'args-schema', version: '1', args: {type: 'object', required: ['topic'], properties: {topic: {type: 'string'}}}};
export default async function (args, g) {
  return args.topic;
}
