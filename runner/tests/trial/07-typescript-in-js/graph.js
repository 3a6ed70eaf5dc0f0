export const meta = {name: 'typescript-in-js', slug: 'typescript-in-js', version: '1'};
interface Args { topic: string }
export default async function (args, g) {
  return args.topic;
}
